//! The statements on a cell database that the operator APIs need:
//! services (`os-services`: list, enable/disable, force down, delete) and
//! compute nodes with their service (`os-hypervisors`). The cell conductor
//! remains the writer of heartbeats and resources; the API writes only the
//! operator's switches (`disabled`, `disabled_reason`, `forced_down`) and
//! the soft delete of a service with its nodes.

use chrono::{DateTime, Utc};
use migrations::BeginWrite;

use super::{with_pool, CellDb};
use crate::metrics::measured;
use crate::Error;

/// A live service row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ServiceRecord {
    /// Cell-local id (the API id below 2.53).
    pub id: i64,
    /// UUID (the API id from 2.53).
    pub uuid: String,
    /// Host.
    pub host: String,
    /// Binary (`nova-compute`).
    pub binary: String,
    /// Topic.
    pub topic: Option<String>,
    /// Disabled by an operator.
    pub disabled: bool,
    /// Why.
    pub disabled_reason: Option<String>,
    /// Forced down by an operator.
    pub forced_down: bool,
    /// Last heartbeat.
    pub last_seen_up: Option<DateTime<Utc>>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Updated.
    pub updated_at: Option<DateTime<Utc>>,
}

const SERVICE_COLUMNS: &str = "id, uuid, host, \"binary\", topic, disabled, disabled_reason, \
    forced_down, last_seen_up, created_at, updated_at";

/// A live compute node with its service (what `os-hypervisors` shows).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct HypervisorRecord {
    /// Cell-local id (the API id below 2.53).
    pub id: i64,
    /// UUID (the API id from 2.53; the placement provider).
    pub uuid: String,
    /// Service host.
    pub host: String,
    /// Node name.
    pub hypervisor_hostname: String,
    /// Driver type.
    pub hypervisor_type: String,
    /// Driver version.
    pub hypervisor_version: i64,
    /// VCPUs.
    pub vcpus: i64,
    /// RAM, MB.
    pub memory_mb: i64,
    /// Disk, GB.
    pub local_gb: i64,
    /// VCPUs used.
    pub vcpus_used: i64,
    /// RAM used, MB.
    pub memory_mb_used: i64,
    /// Disk used, GB.
    pub local_gb_used: i64,
    /// Free RAM, MB.
    pub free_ram_mb: Option<i64>,
    /// Free disk, GB.
    pub free_disk_gb: Option<i64>,
    /// Least available disk, GB.
    pub disk_available_least: Option<i64>,
    /// Workload.
    pub current_workload: Option<i64>,
    /// Running instances.
    pub running_vms: Option<i64>,
    /// Host IP.
    pub host_ip: Option<String>,
    /// CPU info (JSON).
    pub cpu_info: Option<String>,
    /// Its service's id.
    pub service_id: Option<i64>,
    /// Its service's uuid.
    pub service_uuid: Option<String>,
    /// Its service is disabled.
    pub service_disabled: Option<bool>,
    /// Why.
    pub service_disabled_reason: Option<String>,
    /// Its service is forced down.
    pub service_forced_down: Option<bool>,
    /// Its service's last heartbeat.
    pub service_last_seen_up: Option<DateTime<Utc>>,
}

const HYPERVISOR_SELECT: &str = "SELECT n.id, n.uuid, n.host, n.hypervisor_hostname, \
    n.hypervisor_type, n.hypervisor_version, n.vcpus, n.memory_mb, n.local_gb, n.vcpus_used, \
    n.memory_mb_used, n.local_gb_used, n.free_ram_mb, n.free_disk_gb, n.disk_available_least, \
    n.current_workload, n.running_vms, n.host_ip, n.cpu_info, s.id AS service_id, \
    s.uuid AS service_uuid, s.disabled AS service_disabled, \
    s.disabled_reason AS service_disabled_reason, s.forced_down AS service_forced_down, \
    s.last_seen_up AS service_last_seen_up \
    FROM compute_nodes n LEFT JOIN services s ON s.id = n.service_id AND NOT s.deleted \
    WHERE NOT n.deleted";

/// The operator's switches on a service, written together.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSwitches {
    /// Disabled.
    pub disabled: bool,
    /// Why (cleared when enabled).
    pub disabled_reason: Option<String>,
    /// Forced down.
    pub forced_down: bool,
}

/// What deleting a service did.
#[derive(Debug, Clone, PartialEq)]
pub enum ServiceDeleted {
    /// Deleted, with the uuids of the compute nodes deleted with it.
    Deleted {
        /// Compute node (= placement provider) uuids.
        nodes: Vec<String>,
    },
    /// No live service with that id.
    NotFound,
    /// A compute service still hosting instances (nothing changed).
    HasInstances,
}

impl CellDb {
    /// Live services, by host then binary, optionally of one host and/or
    /// binary.
    pub async fn services_list(
        &self,
        host: Option<&str>,
        binary: Option<&str>,
    ) -> Result<Vec<ServiceRecord>, Error> {
        let sql = format!(
            "SELECT {SERVICE_COLUMNS} FROM services WHERE NOT deleted \
             AND ($1 = '' OR host = $1) AND ($2 = '' OR \"binary\" = $2) ORDER BY host, \"binary\", id"
        );
        Ok(with_pool!(self.pool(), p => {
            measured("services_list", sqlx::query_as(&sql).bind(host.unwrap_or(""))
                .bind(binary.unwrap_or("")).fetch_all(p)).await?
        }))
    }

    /// The live service with this uuid.
    pub async fn service_by_uuid(&self, uuid: &str) -> Result<Option<ServiceRecord>, Error> {
        let sql = format!("SELECT {SERVICE_COLUMNS} FROM services WHERE NOT deleted AND uuid = $1");
        Ok(with_pool!(self.pool(), p => {
            measured("service_by_uuid", sqlx::query_as(&sql).bind(uuid).fetch_optional(p)).await?
        }))
    }

    /// The live service with this cell-local id.
    pub async fn service_by_id(&self, id: i64) -> Result<Option<ServiceRecord>, Error> {
        let sql = format!("SELECT {SERVICE_COLUMNS} FROM services WHERE NOT deleted AND id = $1");
        Ok(with_pool!(self.pool(), p => {
            measured("service_by_id", sqlx::query_as(&sql).bind(id).fetch_optional(p)).await?
        }))
    }

    /// Writes the operator's switches on the live service `id`; the row as
    /// it is now, `None` when there is no such live service.
    pub async fn service_set(
        &self,
        id: i64,
        s: &ServiceSwitches,
    ) -> Result<Option<ServiceRecord>, Error> {
        let sql = format!(
            "UPDATE services SET disabled = $1, disabled_reason = $2, forced_down = $3, \
             updated_at = $4 WHERE id = $5 AND NOT deleted RETURNING {SERVICE_COLUMNS}"
        );
        Ok(with_pool!(self.pool(), p => {
            measured("service_set", sqlx::query_as(&sql).bind(s.disabled)
                .bind(s.disabled_reason.as_deref()).bind(s.forced_down).bind(Utc::now()).bind(id)
                .fetch_optional(p)).await?
        }))
    }

    /// Soft-deletes the live service `id` and (for a compute service) its
    /// compute nodes, in one transaction; a compute service hosting live
    /// instances is left alone.
    pub async fn service_delete(&self, id: i64) -> Result<ServiceDeleted, Error> {
        let now = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = measured("begin", p.begin_write()).await?;
            let row: Option<(String, String)> = measured("service_get", sqlx::query_as(
                "SELECT host, \"binary\" FROM services WHERE id = $1 AND NOT deleted")
                .bind(id).fetch_optional(&mut *tx)).await?;
            let Some((host, binary)) = row else {
                return Ok(ServiceDeleted::NotFound);
            };
            let compute = binary == super::cell::COMPUTE_BINARY;
            if compute {
                let n: i64 = measured("service_instances", sqlx::query_scalar(
                    "SELECT COUNT(*) FROM instances WHERE host = $1 AND NOT deleted")
                    .bind(&host).fetch_one(&mut *tx)).await?;
                if n > 0 {
                    return Ok(ServiceDeleted::HasInstances);
                }
            }
            let nodes: Vec<String> = if compute {
                measured("service_nodes_delete", sqlx::query_scalar(
                    "UPDATE compute_nodes SET deleted = TRUE, deleted_at = $1, updated_at = $1 \
                     WHERE (service_id = $2 OR host = $3) AND NOT deleted RETURNING uuid")
                    .bind(now).bind(id).bind(&host).fetch_all(&mut *tx)).await?
            } else {
                Vec::new()
            };
            measured("service_delete", sqlx::query(
                "UPDATE services SET deleted = TRUE, deleted_at = $1, updated_at = $1 WHERE id = $2")
                .bind(now).bind(id).execute(&mut *tx)).await?;
            measured("commit", tx.commit()).await?;
            ServiceDeleted::Deleted { nodes }
        }))
    }

    /// Live compute nodes with their service, by host then node.
    pub async fn hypervisors(&self) -> Result<Vec<HypervisorRecord>, Error> {
        let sql = format!("{HYPERVISOR_SELECT} ORDER BY n.host, n.hypervisor_hostname, n.id");
        Ok(with_pool!(self.pool(), p => {
            measured("hypervisors_list", sqlx::query_as(&sql).fetch_all(p)).await?
        }))
    }

    /// `(uuid, display name)` of the live instances on a node.
    pub async fn instances_on_node(
        &self,
        host: &str,
        node: &str,
    ) -> Result<Vec<(String, String)>, Error> {
        let rows: Vec<(String, Option<String>)> = with_pool!(self.pool(), p => {
            measured("node_instances", sqlx::query_as(
                "SELECT uuid, display_name FROM instances WHERE host = $1 AND node = $2 \
                 AND NOT deleted ORDER BY created_at, uuid")
                .bind(host).bind(node).fetch_all(p)).await?
        });
        Ok(rows
            .into_iter()
            .map(|(u, n)| (u, n.unwrap_or_default()))
            .collect())
    }

    /// `(project_id, vcpus, memory_mb, root_gb + ephemeral_gb)` of each
    /// live instance on `host` (the deprecated `os-hosts` show).
    pub async fn host_instance_resources(
        &self,
        host: &str,
    ) -> Result<Vec<(String, i64, i64, i64)>, Error> {
        Ok(with_pool!(self.pool(), p => {
            measured("host_instance_resources", sqlx::query_as(
                "SELECT project_id, COALESCE(vcpus, 0), COALESCE(memory_mb, 0), \
                 COALESCE(root_gb, 0) + COALESCE(ephemeral_gb, 0) FROM instances \
                 WHERE host = $1 AND NOT deleted ORDER BY created_at, uuid")
                .bind(host).fetch_all(p)).await?
        }))
    }
}
