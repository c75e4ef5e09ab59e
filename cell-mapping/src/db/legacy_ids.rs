//! Region-wide integer ids of compute nodes and services (API database
//! tables `compute_node_ids` and `service_ids`): what the Compute API
//! answers as `id` below microversion 2.53, where a cell's own ids would
//! repeat from cell to cell. An id is handed out the first time a UUID is
//! asked for (`INSERT … ON CONFLICT DO NOTHING`, so concurrent API
//! processes agree) and never reused.

use std::collections::HashMap;

use super::{placeholders, with_pool, ApiDb, CHUNK};
use crate::metrics::measured;
use crate::Error;

/// Which kind of record an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegacyKind {
    /// A compute node (`os-hypervisors`).
    ComputeNode,
    /// A service (`os-services`, a hypervisor's `service.id`).
    Service,
}

impl LegacyKind {
    fn table(self) -> &'static str {
        match self {
            LegacyKind::ComputeNode => "compute_node_ids",
            LegacyKind::Service => "service_ids",
        }
    }
}

impl ApiDb {
    /// The region-wide id of each of `uuids`, handing out ids to those
    /// without one (in the order given).
    pub async fn legacy_ids(
        &self,
        kind: LegacyKind,
        uuids: &[String],
    ) -> Result<HashMap<String, i64>, Error> {
        let mut out = self.read_legacy_ids(kind, uuids).await?;
        let missing: Vec<&String> = uuids.iter().filter(|u| !out.contains_key(*u)).collect();
        if missing.is_empty() {
            return Ok(out);
        }
        let table = kind.table();
        for chunk in missing.chunks(CHUNK) {
            let values = (0..chunk.len())
                .map(|i| format!("(${})", i + 1))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!("INSERT INTO {table} (uuid) VALUES {values} ON CONFLICT DO NOTHING");
            with_pool!(self.pool(), p => {
                let mut q = sqlx::query(&sql);
                for u in chunk {
                    q = q.bind(u.as_str());
                }
                measured("legacy_id_insert", q.execute(p)).await?.rows_affected()
            });
        }
        let owned: Vec<String> = missing.into_iter().cloned().collect();
        out.extend(self.read_legacy_ids(kind, &owned).await?);
        Ok(out)
    }

    async fn read_legacy_ids(
        &self,
        kind: LegacyKind,
        uuids: &[String],
    ) -> Result<HashMap<String, i64>, Error> {
        let table = kind.table();
        let mut out = HashMap::with_capacity(uuids.len());
        for chunk in uuids.chunks(CHUNK) {
            let sql = format!(
                "SELECT uuid, id FROM {table} WHERE uuid IN ({})",
                placeholders(1, chunk.len())
            );
            let rows: Vec<(String, i64)> = with_pool!(self.pool(), p => {
                let mut q = sqlx::query_as(&sql);
                for u in chunk {
                    q = q.bind(u);
                }
                measured("legacy_id_get", q.fetch_all(p)).await?
            });
            out.extend(rows);
        }
        Ok(out)
    }

    /// The UUID the region-wide `id` names, if any.
    pub async fn legacy_uuid(&self, kind: LegacyKind, id: i64) -> Result<Option<String>, Error> {
        let sql = format!("SELECT uuid FROM {} WHERE id = $1", kind.table());
        Ok(with_pool!(self.pool(), p => {
            measured("legacy_uuid_get", sqlx::query_scalar(&sql).bind(id).fetch_optional(p)).await?
        }))
    }
}
