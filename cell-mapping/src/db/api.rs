//! Every statement on the API database's cell, host and instance mappings.

use chrono::Utc;
use fabric::ids::CellUuid;
use migrations::BeginWrite;

use super::{placeholders, with_pool, ApiDb, Pool, CHUNK};
use crate::metrics::measured;
use crate::Error;

/// A row of `cell_mappings`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellMapping {
    /// Database id (what host and instance mappings point at).
    pub id: i64,
    /// The cell's UUID (cell0: all zeros).
    pub uuid: CellUuid,
    /// Optional name.
    pub name: Option<String>,
    /// The cell's bus (`amqp://…`, `inproc://…`, `none:///` for cell0).
    pub transport_url: String,
    /// The cell's database URL.
    pub database_connection: String,
    /// A disabled cell takes no new builds; its instances keep working.
    pub disabled: bool,
}

impl CellMapping {
    /// Whether this is cell0.
    pub fn is_cell0(&self) -> bool {
        self.uuid == fabric::ids::CELL0_UUID
    }

    /// The name, or `""`.
    pub fn name_or_empty(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }
}

/// A host mapping with its cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMapping {
    /// The compute host.
    pub host: String,
    /// Its cell.
    pub cell_uuid: CellUuid,
    /// The cell's name.
    pub cell_name: Option<String>,
}

/// An instance to map (read from a cell database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRow {
    /// Instance UUID.
    pub uuid: String,
    /// Owner project.
    pub project_id: String,
    /// Owner user.
    pub user_id: String,
    /// Soft-deleted in its cell.
    pub deleted: bool,
}

/// What an instance mapping says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceMappingState {
    /// No mapping.
    Missing,
    /// Mapped, no cell yet.
    NoCell,
    /// Mapped to this cell.
    Cell(CellMapping),
}

/// The `project_id` of the map-instances progress marker row (as upstream).
pub const MAP_MARKER_PROJECT: &str = "INSTANCE_MIGRATION_MARKER";

const CELL_COLS: &str = "id, uuid, name, transport_url, database_connection, disabled";
type CellRow = (i64, String, Option<String>, String, String, bool);

fn cell_from_row(r: CellRow) -> Result<CellMapping, Error> {
    let uuid = r.1.parse::<CellUuid>().map_err(|e| Error::Db {
        op: "decode_cell_uuid",
        source: sqlx::Error::Decode(Box::new(e)),
    })?;
    Ok(CellMapping {
        id: r.0,
        uuid,
        name: r.2,
        transport_url: r.3,
        database_connection: r.4,
        disabled: r.5,
    })
}

/// The unique constraint a failed statement violated, if that is why it failed.
fn violated(e: &Error) -> Option<&'static str> {
    match e {
        Error::Db { source, .. } => migrations::unique_violation(source),
        _ => None,
    }
}

impl ApiDb {
    pub(crate) async fn has_schema(&self) -> Result<bool, Error> {
        match self.pool() {
            Pool::Postgres(p) => {
                measured(
                    "api_has_schema",
                    sqlx::query_scalar::<_, bool>(
                        "SELECT to_regclass('cell_mappings') IS NOT NULL",
                    )
                    .fetch_one(p),
                )
                .await
            }
            Pool::Sqlite(p) => {
                measured(
                    "api_has_schema",
                    sqlx::query_scalar::<_, bool>(
                        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cell_mappings')",
                    )
                    .fetch_one(p),
                )
                .await
            }
        }
    }

    /// Every cell mapping, by id.
    pub async fn cells(&self) -> Result<Vec<CellMapping>, Error> {
        let sql = format!("SELECT {CELL_COLS} FROM cell_mappings ORDER BY id");
        let rows: Vec<CellRow> = with_pool!(self.pool(), p => {
            measured("cell_list", sqlx::query_as(&sql).fetch_all(p)).await?
        });
        rows.into_iter().map(cell_from_row).collect()
    }

    /// The cell mapping with this UUID.
    pub async fn cell(&self, uuid: &CellUuid) -> Result<Option<CellMapping>, Error> {
        let sql = format!("SELECT {CELL_COLS} FROM cell_mappings WHERE uuid = $1");
        let row: Option<CellRow> = with_pool!(self.pool(), p => {
            measured("cell_get", sqlx::query_as(&sql).bind(uuid.to_string()).fetch_optional(p)).await?
        });
        row.map(cell_from_row).transpose()
    }

    /// The cell mapping with this UUID, or [`Error::CellNotFound`].
    pub async fn cell_required(&self, uuid: &CellUuid) -> Result<CellMapping, Error> {
        self.cell(uuid)
            .await?
            .ok_or_else(|| Error::CellNotFound(uuid.to_string()))
    }

    /// Another cell (not `except_id`) using either URL, as upstream's check.
    pub async fn cell_using(
        &self,
        transport_url: &str,
        database_connection: &str,
        except_id: Option<i64>,
    ) -> Result<Option<CellUuid>, Error> {
        let sql = "SELECT uuid FROM cell_mappings \
                   WHERE (transport_url = $1 OR database_connection = $2) AND id <> $3 \
                   ORDER BY id LIMIT 1";
        let row: Option<String> = with_pool!(self.pool(), p => {
            measured("cell_using", sqlx::query_scalar(sql)
                .bind(transport_url)
                .bind(database_connection)
                .bind(except_id.unwrap_or(-1))
                .fetch_optional(p)).await?
        });
        Ok(row.and_then(|u| u.parse().ok()))
    }

    /// Inserts a cell mapping (one statement: nothing half-written).
    pub async fn insert_cell(
        &self,
        uuid: CellUuid,
        name: Option<&str>,
        transport_url: &str,
        database_connection: &str,
        disabled: bool,
    ) -> Result<CellMapping, Error> {
        let sql = "INSERT INTO cell_mappings \
                   (uuid, name, transport_url, database_connection, disabled, created_at, updated_at) \
                   VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING id";
        let now = Utc::now();
        let res: Result<i64, Error> = with_pool!(self.pool(), p => {
            measured("cell_insert", sqlx::query_scalar(sql)
                .bind(uuid.to_string())
                .bind(name)
                .bind(transport_url)
                .bind(database_connection)
                .bind(disabled)
                .bind(now)
                .fetch_one(p)).await
        });
        let id = match res {
            Ok(id) => id,
            Err(e) => {
                return Err(match violated(&e) {
                    Some("uniq_cell_mappings0name") => {
                        Error::DuplicateName(name.unwrap_or_default().to_owned())
                    }
                    Some("uniq_cell_mappings0uuid") => Error::DuplicateCell(uuid),
                    Some("uniq_cell_mappings0transport_url0database_connection") => {
                        // A concurrent create won the race for this URL pair.
                        match self
                            .cell_using(transport_url, database_connection, None)
                            .await
                        {
                            Ok(Some(other)) => Error::DuplicateCell(other),
                            _ => e,
                        }
                    }
                    _ => e,
                });
            }
        };
        Ok(CellMapping {
            id,
            uuid,
            name: name.map(str::to_owned),
            transport_url: transport_url.to_owned(),
            database_connection: database_connection.to_owned(),
            disabled,
        })
    }

    /// Writes every column of `cell` (found by its id); one statement.
    pub async fn update_cell(&self, cell: &CellMapping) -> Result<(), Error> {
        let sql = "UPDATE cell_mappings SET name = $1, transport_url = $2, \
                   database_connection = $3, disabled = $4, updated_at = $5 WHERE id = $6";
        let res: Result<u64, Error> = with_pool!(self.pool(), p => {
            measured("cell_update", sqlx::query(sql)
                .bind(cell.name.as_deref())
                .bind(&cell.transport_url)
                .bind(&cell.database_connection)
                .bind(cell.disabled)
                .bind(Utc::now())
                .bind(cell.id)
                .execute(p)).await.map(|r| r.rows_affected())
        });
        match res {
            Ok(1) => Ok(()),
            Ok(_) => Err(Error::CellNotFound(cell.uuid.to_string())),
            Err(e) => Err(match violated(&e) {
                Some("uniq_cell_mappings0name") => {
                    Error::DuplicateName(cell.name.clone().unwrap_or_default())
                }
                Some("uniq_cell_mappings0transport_url0database_connection") => {
                    match self
                        .cell_using(
                            &cell.transport_url,
                            &cell.database_connection,
                            Some(cell.id),
                        )
                        .await
                    {
                        Ok(Some(other)) => Error::DuplicateCell(other),
                        _ => e,
                    }
                }
                _ => e,
            }),
        }
    }

    /// The cache's cheap change marker: row count, highest id and latest
    /// update time of `cell_mappings`. Every write here sets `updated_at`.
    pub async fn cells_marker(&self) -> Result<(i64, Option<i64>, Option<String>), Error> {
        let sql = "SELECT COUNT(*), MAX(id), CAST(MAX(COALESCE(updated_at, created_at)) AS TEXT) \
                   FROM cell_mappings";
        Ok(with_pool!(self.pool(), p => {
            measured("cell_marker", sqlx::query_as(sql).fetch_one(p)).await?
        }))
    }

    /// Deletes a cell in one transaction. With `force`, its host mappings
    /// and instance mappings go first. Without, the cell is deleted only if
    /// nothing points at it (checked in the same statement). Returns whether
    /// the cell row was deleted.
    pub async fn delete_cell(&self, cell_id: i64, force: bool) -> Result<bool, Error> {
        let guarded = "DELETE FROM cell_mappings WHERE id = $1 \
             AND NOT EXISTS (SELECT 1 FROM host_mappings WHERE cell_id = $1) \
             AND NOT EXISTS (SELECT 1 FROM instance_mappings WHERE cell_id = $1)";
        with_pool!(self.pool(), p => {
            let mut tx = measured("cell_delete_begin", p.begin_write()).await?;
            if force {
                measured("cell_delete_instance_mappings",
                    sqlx::query("DELETE FROM instance_mappings WHERE cell_id = $1")
                        .bind(cell_id).execute(&mut *tx)).await?;
                measured("cell_delete_host_mappings",
                    sqlx::query("DELETE FROM host_mappings WHERE cell_id = $1")
                        .bind(cell_id).execute(&mut *tx)).await?;
            }
            let n = measured("cell_delete", sqlx::query(guarded).bind(cell_id).execute(&mut *tx))
                .await?
                .rows_affected();
            if n == 1 {
                measured("cell_delete_commit", tx.commit()).await?;
                Ok(true)
            } else {
                measured("cell_delete_rollback", tx.rollback()).await?;
                Ok(false)
            }
        })
    }

    /// Number of host mappings of a cell.
    pub async fn count_hosts(&self, cell_id: i64) -> Result<i64, Error> {
        Ok(with_pool!(self.pool(), p => {
            measured("host_count", sqlx::query_scalar("SELECT COUNT(*) FROM host_mappings WHERE cell_id = $1")
                .bind(cell_id).fetch_one(p)).await?
        }))
    }

    /// Number of instance mappings of a cell.
    pub async fn count_instance_mappings(&self, cell_id: i64) -> Result<i64, Error> {
        Ok(with_pool!(self.pool(), p => {
            measured("instance_mapping_count", sqlx::query_scalar(
                "SELECT COUNT(*) FROM instance_mappings WHERE cell_id = $1")
                .bind(cell_id).fetch_one(p)).await?
        }))
    }

    /// Host mappings, of one cell or all, by host name.
    pub async fn hosts(&self, cell_id: Option<i64>) -> Result<Vec<HostMapping>, Error> {
        let sql = "SELECT h.host, c.uuid, c.name FROM host_mappings h \
                   JOIN cell_mappings c ON c.id = h.cell_id \
                   WHERE ($1 < 0 OR h.cell_id = $1) ORDER BY h.host";
        let rows: Vec<(String, String, Option<String>)> = with_pool!(self.pool(), p => {
            measured("host_list", sqlx::query_as(sql).bind(cell_id.unwrap_or(-1)).fetch_all(p)).await?
        });
        Ok(rows
            .into_iter()
            .filter_map(|(host, uuid, cell_name)| {
                Some(HostMapping {
                    host,
                    cell_uuid: uuid.parse().ok()?,
                    cell_name,
                })
            })
            .collect())
    }

    /// The cell id a host is mapped to.
    pub async fn host_cell(&self, host: &str) -> Result<Option<i64>, Error> {
        Ok(with_pool!(self.pool(), p => {
            measured("host_get", sqlx::query_scalar("SELECT cell_id FROM host_mappings WHERE host = $1")
                .bind(host).fetch_optional(p)).await?
        }))
    }

    /// The cell ids the given hosts are mapped to (hosts without mapping absent).
    pub async fn hosts_cells(&self, hosts: &[String]) -> Result<Vec<(String, i64)>, Error> {
        let mut out = Vec::new();
        for chunk in hosts.chunks(CHUNK) {
            let sql = format!(
                "SELECT host, cell_id FROM host_mappings WHERE host IN ({})",
                placeholders(1, chunk.len())
            );
            let rows: Vec<(String, i64)> = with_pool!(self.pool(), p => {
                let mut q = sqlx::query_as(&sql);
                for h in chunk {
                    q = q.bind(h);
                }
                measured("host_cells", q.fetch_all(p)).await?
            });
            out.extend(rows);
        }
        Ok(out)
    }

    /// Maps `hosts` to the cell, skipping hosts that already have a mapping
    /// (`ON CONFLICT DO NOTHING` on `uniq_host_mappings0host`, so concurrent
    /// callers never fail). Returns the hosts this call inserted.
    pub async fn map_hosts(&self, cell_id: i64, hosts: &[String]) -> Result<Vec<String>, Error> {
        let mut inserted = Vec::new();
        let now = Utc::now();
        for chunk in hosts.chunks(CHUNK) {
            let values = (0..chunk.len())
                .map(|i| format!("($1, ${}, $2, $2)", i + 3))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "INSERT INTO host_mappings (cell_id, host, created_at, updated_at) VALUES {values} \
                 ON CONFLICT DO NOTHING RETURNING host"
            );
            let rows: Vec<String> = with_pool!(self.pool(), p => {
                let mut q = sqlx::query_scalar(&sql).bind(cell_id).bind(now);
                for h in chunk {
                    q = q.bind(h);
                }
                measured("host_map", q.fetch_all(p)).await?
            });
            inserted.extend(rows);
        }
        Ok(inserted)
    }

    /// Deletes the mapping of `host` in the cell; returns whether it existed.
    pub async fn delete_host(&self, cell_id: i64, host: &str) -> Result<bool, Error> {
        let n = with_pool!(self.pool(), p => {
            measured("host_delete", sqlx::query("DELETE FROM host_mappings WHERE host = $1 AND cell_id = $2")
                .bind(host).bind(cell_id).execute(p)).await?.rows_affected()
        });
        Ok(n == 1)
    }

    /// What the instance mapping of `uuid` says.
    pub async fn instance_mapping(&self, uuid: &str) -> Result<InstanceMappingState, Error> {
        type Row = (
            i64,
            Option<i64>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<bool>,
        );
        let sql = "SELECT im.id, c.id, c.uuid, c.name, c.transport_url, c.database_connection, c.disabled \
                   FROM instance_mappings im LEFT JOIN cell_mappings c ON c.id = im.cell_id \
                   WHERE im.instance_uuid = $1";
        let row: Option<Row> = with_pool!(self.pool(), p => {
            measured("instance_mapping_get", sqlx::query_as(sql).bind(uuid).fetch_optional(p)).await?
        });
        Ok(match row {
            None => InstanceMappingState::Missing,
            Some((_, Some(id), Some(cu), name, Some(t), Some(d), Some(dis))) => {
                InstanceMappingState::Cell(cell_from_row((id, cu, name, t, d, dis))?)
            }
            Some(_) => InstanceMappingState::NoCell,
        })
    }

    /// Maps instances to the cell, skipping those already mapped. Returns
    /// how many mappings were created.
    pub async fn map_instances(&self, cell_id: i64, rows: &[InstanceRow]) -> Result<u64, Error> {
        let mut n = 0;
        let now = Utc::now();
        for chunk in rows.chunks(CHUNK / 4) {
            let values = (0..chunk.len())
                .map(|i| {
                    let b = 3 + i * 4;
                    format!("(${b}, $1, ${}, ${}, ${}, $2, $2)", b + 1, b + 2, b + 3)
                })
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "INSERT INTO instance_mappings \
                 (instance_uuid, cell_id, project_id, user_id, queued_for_delete, created_at, updated_at) \
                 VALUES {values} ON CONFLICT DO NOTHING"
            );
            n += with_pool!(self.pool(), p => {
                let mut q = sqlx::query(&sql).bind(cell_id).bind(now);
                for r in chunk {
                    q = q.bind(&r.uuid).bind(&r.project_id).bind(&r.user_id).bind(r.deleted);
                }
                measured("instance_map", q.execute(p)).await?.rows_affected()
            });
        }
        Ok(n)
    }

    /// Removes and returns the map-instances progress marker (the UUID of
    /// the last instance handled), as upstream keeps it: an instance mapping
    /// whose project is [`MAP_MARKER_PROJECT`], with spaces for dashes.
    pub async fn take_map_marker(&self) -> Result<Option<String>, Error> {
        with_pool!(self.pool(), p => {
            let mut tx = measured("map_marker_begin", p.begin_write()).await?;
            let m: Option<String> = measured("map_marker_get", sqlx::query_scalar(
                "DELETE FROM instance_mappings WHERE project_id = $1 RETURNING instance_uuid")
                .bind(MAP_MARKER_PROJECT).fetch_optional(&mut *tx)).await?;
            measured("map_marker_commit", tx.commit()).await?;
            Ok(m.map(|s| s.replace(' ', "-")))
        })
    }

    /// Stores the map-instances progress marker.
    pub async fn set_map_marker(&self, last_uuid: &str) -> Result<(), Error> {
        let sql = "INSERT INTO instance_mappings \
                   (instance_uuid, cell_id, project_id, user_id, created_at, updated_at) \
                   VALUES ($1, NULL, $2, $2, $3, $3) ON CONFLICT DO NOTHING";
        with_pool!(self.pool(), p => {
            measured("map_marker_set", sqlx::query(sql)
                .bind(last_uuid.replace('-', " "))
                .bind(MAP_MARKER_PROJECT)
                .bind(Utc::now())
                .execute(p)).await?;
        });
        Ok(())
    }
}
