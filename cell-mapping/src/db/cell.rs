//! The few statements on a cell database that discovery, instance mapping
//! and cell/host deletion need. Everything else in a cell database belongs to
//! the cell conductor.

use chrono::Utc;

use super::api::InstanceRow;
use super::{placeholders, with_pool, CellDb, CHUNK};
use crate::metrics::measured;
use crate::Error;

/// The `services.binary` of a compute service (as upstream).
pub const COMPUTE_BINARY: &str = "nova-compute";

impl CellDb {
    /// Hosts of live compute nodes not yet marked mapped.
    pub async fn unmapped_compute_hosts(&self) -> Result<Vec<String>, Error> {
        Ok(with_pool!(self.pool(), p => {
            measured("cell_unmapped_nodes", sqlx::query_scalar(
                "SELECT DISTINCT host FROM compute_nodes WHERE NOT mapped AND NOT deleted ORDER BY host")
                .fetch_all(p)).await?
        }))
    }

    /// Number of live compute nodes.
    pub async fn count_compute_nodes(&self) -> Result<i64, Error> {
        Ok(with_pool!(self.pool(), p => {
            measured("cell_count_nodes", sqlx::query_scalar(
                "SELECT COUNT(*) FROM compute_nodes WHERE NOT deleted").fetch_one(p)).await?
        }))
    }

    /// Hosts of live compute services.
    pub async fn compute_service_hosts(&self) -> Result<Vec<String>, Error> {
        Ok(with_pool!(self.pool(), p => {
            measured("cell_compute_services", sqlx::query_scalar(
                "SELECT DISTINCT host FROM services WHERE \"binary\" = $1 AND NOT deleted ORDER BY host")
                .bind(COMPUTE_BINARY).fetch_all(p)).await?
        }))
    }

    /// Marks the live compute nodes of `hosts` mapped.
    pub async fn mark_mapped(&self, hosts: &[String]) -> Result<u64, Error> {
        let mut n = 0;
        let now = Utc::now();
        for chunk in hosts.chunks(CHUNK) {
            let sql = format!(
                "UPDATE compute_nodes SET mapped = TRUE, updated_at = $1 \
                 WHERE NOT mapped AND NOT deleted AND host IN ({})",
                placeholders(2, chunk.len())
            );
            n += with_pool!(self.pool(), p => {
                let mut q = sqlx::query(&sql).bind(now);
                for h in chunk {
                    q = q.bind(h);
                }
                measured("cell_mark_mapped", q.execute(p)).await?.rows_affected()
            });
        }
        Ok(n)
    }

    /// Marks the compute nodes of `host` (or of every host) unmapped, so a
    /// later discovery maps them again.
    pub async fn unmap(&self, host: Option<&str>) -> Result<u64, Error> {
        let sql = "UPDATE compute_nodes SET mapped = FALSE, updated_at = $1 \
                   WHERE mapped AND ($2 = '' OR host = $2)";
        Ok(with_pool!(self.pool(), p => {
            measured("cell_unmap", sqlx::query(sql).bind(Utc::now()).bind(host.unwrap_or(""))
                .execute(p)).await?.rows_affected()
        }))
    }

    /// Number of live instances (in the cell, or on one host of it).
    pub async fn count_live_instances(&self, host: Option<&str>) -> Result<i64, Error> {
        let sql = "SELECT COUNT(*) FROM instances WHERE NOT deleted AND ($1 = '' OR host = $1)";
        Ok(with_pool!(self.pool(), p => {
            measured("cell_count_instances", sqlx::query_scalar(sql).bind(host.unwrap_or(""))
                .fetch_one(p)).await?
        }))
    }

    /// Up to `limit` instances (deleted ones too), in the cell's id order,
    /// after the instance `after` (a UUID) if given.
    pub async fn instances_after(
        &self,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<InstanceRow>, Error> {
        let sql = "SELECT uuid, project_id, user_id, deleted FROM instances \
                   WHERE id > COALESCE((SELECT id FROM instances WHERE uuid = $1), 0) \
                   ORDER BY id LIMIT $2";
        let rows: Vec<(String, String, String, bool)> = with_pool!(self.pool(), p => {
            measured("cell_instances_page", sqlx::query_as(sql).bind(after.unwrap_or(""))
                .bind(limit).fetch_all(p)).await?
        });
        Ok(rows
            .into_iter()
            .map(|(uuid, project_id, user_id, deleted)| InstanceRow {
                uuid,
                project_id,
                user_id,
                deleted,
            })
            .collect())
    }

    /// `Some(deleted)` for an instance row, `None` when there is none.
    pub async fn instance_deleted(&self, uuid: &str) -> Result<Option<bool>, Error> {
        Ok(with_pool!(self.pool(), p => {
            measured("cell_instance_get", sqlx::query_scalar(
                "SELECT deleted FROM instances WHERE uuid = $1").bind(uuid).fetch_optional(p)).await?
        }))
    }
}
