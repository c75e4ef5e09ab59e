//! `compute_nodes`: create or update a node with its resources.

use fabric::rpc::{ComputeNodeUpdate, COMPUTE_BINARY};

use super::{now, on_db, CellDb};
use crate::error::{db, ConductorError, Result};
use crate::metrics::measured;

/// A live compute node (the columns the conductor and tests look at).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ComputeNodeRow {
    /// `id`.
    pub id: i64,
    /// `uuid` (the placement provider's uuid).
    pub uuid: String,
    /// `service_id`.
    pub service_id: Option<i64>,
    /// `host`.
    pub host: String,
    /// `hypervisor_hostname`.
    pub hypervisor_hostname: String,
    /// `hypervisor_type`.
    pub hypervisor_type: String,
    /// `vcpus`.
    pub vcpus: i64,
    /// `memory_mb`.
    pub memory_mb: i64,
    /// `local_gb`.
    pub local_gb: i64,
    /// `vcpus_used`.
    pub vcpus_used: i64,
    /// `running_vms`.
    pub running_vms: Option<i64>,
    /// `cpu_allocation_ratio`.
    pub cpu_allocation_ratio: Option<f64>,
    /// `mapped`.
    pub mapped: bool,
}

const COLUMNS: &str = "id, uuid, service_id, host, hypervisor_hostname, hypervisor_type, vcpus, \
    memory_mb, local_gb, vcpus_used, running_vms, cpu_allocation_ratio, mapped";

impl CellDb {
    /// Creates the live node `(host, hypervisor_hostname)` (with the
    /// proposed uuid) or updates its resources; links it to the host's
    /// compute service. `mapped` is left as it is.
    pub async fn upsert_compute_node(&self, n: &ComputeNodeUpdate) -> Result<ComputeNodeRow> {
        if n.host.is_empty() || n.hypervisor_hostname.is_empty() {
            return Err(ConductorError::BadRequest(
                "compute node needs host and hypervisor_hostname".into(),
            ));
        }
        let service =
            "(SELECT id FROM services WHERE host = $2 AND \"binary\" = $17 AND NOT deleted)";
        let update = format!(
            "UPDATE compute_nodes SET service_id = {service}, hypervisor_type = $4, \
             hypervisor_version = $5, vcpus = $6, memory_mb = $7, local_gb = $8, vcpus_used = $9, \
             memory_mb_used = $10, local_gb_used = $11, running_vms = $12, \
             cpu_allocation_ratio = $13, ram_allocation_ratio = $14, disk_allocation_ratio = $15, \
             host_ip = $16, free_ram_mb = $7 - $10, free_disk_gb = $8 - $11, updated_at = $18, \
             supported_instances = $19 \
             WHERE host = $2 AND hypervisor_hostname = $3 AND NOT deleted AND $1 = $1 \
             RETURNING {COLUMNS}"
        );
        let insert = format!(
            "INSERT INTO compute_nodes (uuid, service_id, host, hypervisor_hostname, hypervisor_type, \
             hypervisor_version, vcpus, memory_mb, local_gb, vcpus_used, memory_mb_used, local_gb_used, \
             running_vms, cpu_allocation_ratio, ram_allocation_ratio, disk_allocation_ratio, host_ip, \
             free_ram_mb, free_disk_gb, created_at, supported_instances) \
             VALUES ($1, {service}, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
             $7 - $10, $8 - $11, $18, $19) RETURNING {COLUMNS}"
        );
        let uuid = if n.uuid.is_empty() {
            uuid::Uuid::new_v4().to_string()
        } else {
            n.uuid
                .parse::<uuid::Uuid>()
                .map_err(|_| {
                    ConductorError::BadRequest(format!(
                        "compute node uuid {:?} is not a UUID",
                        n.uuid
                    ))
                })?
                .to_string()
        };
        let host_ip = (!n.host_ip.is_empty()).then_some(n.host_ip.as_str());
        let supported =
            (!n.supported_instances.is_empty()).then_some(n.supported_instances.as_str());
        macro_rules! binds {
            ($q:expr, $t:expr) => {
                $q.bind(&uuid)
                    .bind(&n.host)
                    .bind(&n.hypervisor_hostname)
                    .bind(&n.hypervisor_type)
                    .bind(n.hypervisor_version)
                    .bind(n.vcpus)
                    .bind(n.memory_mb)
                    .bind(n.local_gb)
                    .bind(n.vcpus_used)
                    .bind(n.memory_mb_used)
                    .bind(n.local_gb_used)
                    .bind(n.running_vms)
                    .bind(n.cpu_allocation_ratio)
                    .bind(n.ram_allocation_ratio)
                    .bind(n.disk_allocation_ratio)
                    .bind(host_ip)
                    .bind(COMPUTE_BINARY)
                    .bind($t)
                    .bind(supported)
            };
        }
        for _ in 0..2 {
            let t = now();
            let row: Option<ComputeNodeRow> = on_db!(self, p => measured("compute_node_update",
                binds!(sqlx::query_as(&update), t).fetch_optional(p)).await
                .map_err(db("compute_node_update"))?);
            if let Some(row) = row {
                return Ok(row);
            }
            let res: std::result::Result<ComputeNodeRow, sqlx::Error> = on_db!(self, p => measured(
                "compute_node_insert", binds!(sqlx::query_as(&insert), t).fetch_one(p)).await);
            match res {
                Ok(row) => return Ok(row),
                Err(e) if migrations::unique_violation(&e).is_some() => continue,
                Err(e) => return Err(db("compute_node_insert")(e)),
            }
        }
        Err(ConductorError::BadRequest(format!(
            "compute node uuid {uuid} is taken by another node"
        )))
    }

    /// Live compute nodes, by host.
    pub async fn compute_nodes(&self) -> Result<Vec<ComputeNodeRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM compute_nodes WHERE NOT deleted ORDER BY host, hypervisor_hostname"
        );
        Ok(on_db!(self, p => measured("compute_node_list",
            sqlx::query_as(&sql).fetch_all(p)).await.map_err(db("compute_node_list"))?))
    }
}

/// The key of `compute_nodes.stats` (a JSON object) that counts the
/// node's consecutive build failures (Nova's `failed_builds`), read by the
/// scheduler's `BuildFailureWeigher`.
pub const FAILED_BUILDS: &str = "failed_builds";

/// How a `stats` document's failure count changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Count {
    /// One more failed build.
    Increment,
    /// A build succeeded: back to 0.
    Reset,
}

/// The failure count of a `stats` document (absent or unreadable: 0).
pub fn failed_builds(stats: Option<&str>) -> i64 {
    stats
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .and_then(|v| v.get(FAILED_BUILDS).and_then(serde_json::Value::as_i64))
        .unwrap_or(0)
        .max(0)
}

/// `stats` with its failure count changed, other keys kept; `None` when
/// nothing changes (a reset of a count already 0).
fn change_stats(stats: Option<&str>, how: Count) -> Option<(String, i64)> {
    let mut doc = stats
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .and_then(|v| match v {
            serde_json::Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    let old = failed_builds(stats);
    let new = match how {
        Count::Increment => old.saturating_add(1),
        Count::Reset if old == 0 => return None,
        Count::Reset => 0,
    };
    doc.insert(FAILED_BUILDS.to_owned(), new.into());
    Some((serde_json::Value::Object(doc).to_string(), new))
}

impl CellDb {
    /// The failure count of the live node `(host, node)`; `None` when there
    /// is no such node.
    pub async fn failed_builds(&self, host: &str, node: &str) -> Result<Option<i64>> {
        let row: Option<(Option<String>,)> = on_db!(self, p => measured("compute_node_stats",
            sqlx::query_as("SELECT stats FROM compute_nodes \
                WHERE host = $1 AND hypervisor_hostname = $2 AND NOT deleted")
                .bind(host).bind(node).fetch_optional(p)).await
            .map_err(db("compute_node_stats"))?);
        Ok(row.map(|(s,)| failed_builds(s.as_deref())))
    }

    /// Counts a failed build on the live node `(host, node)`: its count
    /// after the change (`None`: no such node).
    pub async fn record_build_failure(&self, host: &str, node: &str) -> Result<Option<i64>> {
        self.change_failed_builds(host, node, Count::Increment)
            .await
    }

    /// A build succeeded on `(host, node)`: its failure count goes back to
    /// 0 (nothing is written when it is 0 already).
    pub async fn reset_build_failures(&self, host: &str, node: &str) -> Result<()> {
        self.change_failed_builds(host, node, Count::Reset)
            .await
            .map(|_| ())
    }

    /// Read, change, write if `stats` is still what was read (a concurrent
    /// change makes the write miss and the loop read again), so no count is
    /// lost between conductors of the same cell on either backend.
    async fn change_failed_builds(
        &self,
        host: &str,
        node: &str,
        how: Count,
    ) -> Result<Option<i64>> {
        const ATTEMPTS: usize = 10;
        for _ in 0..ATTEMPTS {
            let row: Option<(i64, Option<String>)> = on_db!(self, p => measured(
                "compute_node_stats", sqlx::query_as("SELECT id, stats FROM compute_nodes \
                    WHERE host = $1 AND hypervisor_hostname = $2 AND NOT deleted")
                    .bind(host).bind(node).fetch_optional(p)).await
                .map_err(db("compute_node_stats"))?);
            let Some((id, old)) = row else {
                return Ok(None);
            };
            let Some((new, count)) = change_stats(old.as_deref(), how) else {
                return Ok(Some(failed_builds(old.as_deref())));
            };
            let n = on_db!(self, p => measured("compute_node_stats_update", sqlx::query(
                "UPDATE compute_nodes SET stats = $1 WHERE id = $2 AND COALESCE(stats, '') = $3")
                .bind(&new).bind(id).bind(old.as_deref().unwrap_or(""))
                .execute(p)).await
                .map_err(db("compute_node_stats_update"))?
                .rows_affected());
            if n > 0 {
                return Ok(Some(count));
            }
        }
        Err(ConductorError::BadRequest(format!(
            "the stats of compute node {host}/{node} kept changing; gave up"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_count_failures_and_keep_other_keys() {
        assert_eq!(failed_builds(None), 0);
        assert_eq!(failed_builds(Some("not json")), 0);
        assert_eq!(failed_builds(Some(r#"{"failed_builds": 3}"#)), 3);
        let (s, n) = change_stats(None, Count::Increment).unwrap();
        assert_eq!((failed_builds(Some(&s)), n), (1, 1));
        let (s, n) =
            change_stats(Some(r#"{"x": "y", "failed_builds": 2}"#), Count::Increment).unwrap();
        assert_eq!(n, 3);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["x"], "y");
        assert_eq!(v[FAILED_BUILDS], 3);
        let (s, n) = change_stats(Some(&s), Count::Reset).unwrap();
        assert_eq!(n, 0);
        assert_eq!(failed_builds(Some(&s)), 0);
        assert_eq!(
            change_stats(Some(&s), Count::Reset),
            None,
            "0 stays unwritten"
        );
        assert_eq!(change_stats(None, Count::Reset), None);
    }
}
