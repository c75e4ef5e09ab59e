//! The statements on a cell database that the API layer (api-super's
//! Compute API, super-conductor and scheduler) needs: creating an instance
//! row when a build lands in a cell (or in cell0 in ERROR with its fault),
//! reads and the multi-cell list, the API's own updates (rename, `deleting`,
//! local delete of an instance that never reached a host or whose compute
//! service is down), and the compute
//! services and nodes the scheduler filters on.
//!
//! The cell conductor keeps its own statements for what computes ask of it;
//! both write the same columns with the same vocabulary (`fabric::rpc`).

use chrono::{DateTime, Utc};
use migrations::BeginWrite;

use super::{placeholders, with_pool, CellDb, CHUNK};
use crate::metrics::measured;
use crate::Error;

/// The flavor copied onto an instance (`instance_extra.flavor`, JSON).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InstanceFlavor {
    /// `flavorid`.
    pub flavorid: String,
    /// Name.
    pub name: String,
    /// VCPU.
    pub vcpus: i64,
    /// MEMORY_MB.
    pub memory_mb: i64,
    /// Root disk, GB.
    pub root_gb: i64,
    /// Ephemeral disk, GB.
    pub ephemeral_gb: i64,
    /// Swap, MB.
    pub swap: i64,
}

/// A fault written with an instance created in ERROR.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFault {
    /// HTTP-like code (500).
    pub code: i64,
    /// Message (cut to 255 characters).
    pub message: String,
    /// Details.
    pub details: String,
}

/// An instance row to create (what the super-conductor writes).
#[derive(Debug, Clone, PartialEq)]
pub struct NewCellInstance {
    /// Instance uuid.
    pub uuid: String,
    /// Project.
    pub project_id: String,
    /// User.
    pub user_id: String,
    /// Display name.
    pub display_name: Option<String>,
    /// Flavor.
    pub flavor: InstanceFlavor,
    /// Image.
    pub image_ref: String,
    /// Chosen host and node (none in cell0).
    pub host: Option<String>,
    /// Node.
    pub node: Option<String>,
    /// Availability zone (requested or the host's).
    pub availability_zone: Option<String>,
    /// Creation time (the build request's, so listings do not reorder).
    pub created_at: DateTime<Utc>,
    /// Request id and global request id of the `create` action.
    pub request_id: String,
    /// Global request id.
    pub global_request_id: String,
    /// Reservation id (shared by the instances of one request).
    pub reservation_id: String,
    /// Index within the request.
    pub launch_index: i64,
    /// Set: the instance is created in ERROR with this fault.
    pub error: Option<NewFault>,
}

/// An instance as the API shows it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CellInstance {
    /// `uuid`.
    pub uuid: String,
    /// `project_id`.
    pub project_id: String,
    /// `user_id`.
    pub user_id: String,
    /// `display_name`.
    pub display_name: Option<String>,
    /// `host`.
    pub host: Option<String>,
    /// `node`.
    pub node: Option<String>,
    /// `vm_state`.
    pub vm_state: Option<String>,
    /// `task_state`.
    pub task_state: Option<String>,
    /// `power_state`.
    pub power_state: Option<i64>,
    /// `availability_zone`.
    pub availability_zone: Option<String>,
    /// `image_ref`.
    pub image_ref: Option<String>,
    /// `reservation_id`.
    pub reservation_id: Option<String>,
    /// `launch_index`.
    pub launch_index: Option<i64>,
    /// `launched_at`.
    pub launched_at: Option<DateTime<Utc>>,
    /// `created_at`.
    pub created_at: DateTime<Utc>,
    /// `updated_at`.
    pub updated_at: Option<DateTime<Utc>>,
    /// `deleted`.
    pub deleted: bool,
    /// `progress`.
    pub progress: Option<i64>,
    /// `instance_extra.flavor` (JSON).
    pub flavor: Option<String>,
    /// `locked`.
    pub locked: bool,
    /// `locked_by` (`owner` or `admin`).
    pub locked_by: Option<String>,
    /// `instance_system_metadata['locked_reason']` (as upstream).
    pub locked_reason: Option<String>,
}

/// The latest fault of an instance.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CellFault {
    /// Instance.
    pub instance_uuid: String,
    /// Code.
    pub code: i64,
    /// Message.
    pub message: Option<String>,
    /// Details.
    pub details: Option<String>,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// A compute node with its service (what the scheduler filters on).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ComputeHost {
    /// Node uuid (= placement resource provider uuid).
    pub uuid: String,
    /// Service host.
    pub host: String,
    /// Node name.
    pub hypervisor_hostname: String,
    /// The service is disabled.
    pub disabled: bool,
    /// The service is forced down.
    pub forced_down: bool,
    /// Last heartbeat.
    pub last_seen_up: Option<DateTime<Utc>>,
    /// The node's `stats` JSON document (written by the cell conductor;
    /// `failed_builds` counts its consecutive build failures).
    pub stats: Option<String>,
}

impl ComputeHost {
    /// The node's consecutive build failures (`stats.failed_builds`;
    /// absent or unreadable: 0).
    pub fn failed_builds(&self) -> u64 {
        self.stats
            .as_deref()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            .and_then(|v| v.get("failed_builds").and_then(serde_json::Value::as_u64))
            .unwrap_or(0)
    }
}

/// A page of a listing: newest first, after `marker`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    /// Only this project (`None`: every project).
    pub project_id: Option<String>,
    /// Only these `vm_state`s (empty: any).
    pub vm_states: Vec<String>,
    /// Keyset marker: rows strictly after (older than) `(created_at, uuid)`.
    pub after: Option<(DateTime<Utc>, String)>,
    /// At most this many rows.
    pub limit: i64,
}

const COLUMNS: &str = "i.uuid, i.project_id, i.user_id, i.display_name, i.host, i.node, \
    i.vm_state, i.task_state, i.power_state, i.availability_zone, i.image_ref, i.reservation_id, \
    i.launch_index, i.launched_at, i.created_at, i.updated_at, i.deleted, i.progress, e.flavor, \
    i.locked, i.locked_by, (SELECT sm.value FROM instance_system_metadata sm \
    WHERE sm.instance_uuid = i.uuid AND sm.key = 'locked_reason') AS locked_reason";

const FROM: &str = "instances i LEFT JOIN instance_extra e ON e.instance_uuid = i.uuid";

/// The event of a delete the API did itself ([`CellDb::api_local_delete`]).
pub const EV_API_LOCAL_DELETE: &str = "api_local_delete";

fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |source| Error::Db { op, source }
}

impl CellDb {
    /// Creates the instance row, its flavor, its `create` action and (in
    /// ERROR) its fault, in one transaction. Building instances start in
    /// `building` / `scheduling`; failed ones in `error` with no task.
    pub async fn create_api_instance(&self, n: &NewCellInstance) -> Result<(), Error> {
        let (vm_state, task_state) = match n.error {
            None => (
                fabric::rpc::vm_state::BUILDING,
                Some(fabric::rpc::task_state::SCHEDULING),
            ),
            Some(_) => (fabric::rpc::vm_state::ERROR, None),
        };
        let flavor = serde_json::to_string(&n.flavor).unwrap_or_default();
        let t = Utc::now();
        with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            measured("api_instance_insert", sqlx::query(
                "INSERT INTO instances (uuid, project_id, user_id, display_name, hostname, vm_state, \
                 task_state, power_state, vcpus, memory_mb, root_gb, ephemeral_gb, image_ref, host, node, \
                 launched_on, availability_zone, reservation_id, launch_index, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $13, $15, $16, \
                 $17, $18, $19)")
                .bind(&n.uuid).bind(&n.project_id).bind(&n.user_id).bind(&n.display_name)
                .bind(vm_state).bind(task_state).bind(fabric::rpc::power_state::NOSTATE as i64)
                .bind(n.flavor.vcpus).bind(n.flavor.memory_mb).bind(n.flavor.root_gb)
                .bind(n.flavor.ephemeral_gb).bind(&n.image_ref).bind(&n.host).bind(&n.node)
                .bind(&n.availability_zone).bind(&n.reservation_id).bind(n.launch_index)
                .bind(n.created_at).bind(t)
                .execute(&mut *tx)).await?;
            measured("api_instance_extra_insert", sqlx::query(
                "INSERT INTO instance_extra (instance_uuid, flavor, created_at) VALUES ($1, $2, $3)")
                .bind(&n.uuid).bind(&flavor).bind(t)
                .execute(&mut *tx)).await?;
            measured("api_action_create", sqlx::query(
                "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                 user_id, project_id, start_time, finish_time, message, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $7)")
                .bind(&n.uuid).bind(fabric::rpc::action::CREATE).bind(&n.request_id)
                .bind(&n.global_request_id).bind(&n.user_id).bind(&n.project_id).bind(t)
                .bind(n.error.as_ref().map(|_| t))
                .bind(n.error.as_ref().map(|_| fabric::rpc::action::ERROR))
                .execute(&mut *tx)).await?;
            if let Some(f) = &n.error {
                let message: String = f.message.chars().take(255).collect();
                measured("api_fault_insert", sqlx::query(
                    "INSERT INTO instance_faults (instance_uuid, code, message, details, created_at) \
                     VALUES ($1, $2, $3, $4, $5)")
                    .bind(&n.uuid).bind(f.code).bind(&message).bind(&f.details).bind(t)
                    .execute(&mut *tx)).await?;
            }
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(())
    }

    /// The instance (deleted ones too).
    pub async fn api_instance(&self, uuid: &str) -> Result<Option<CellInstance>, Error> {
        let sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE i.uuid = $1");
        Ok(with_pool!(self.pool(), p => measured("api_instance_get",
            sqlx::query_as(&sql).bind(uuid).fetch_optional(p)).await?))
    }

    /// Live instances, newest first (`created_at` desc, then `uuid` desc).
    pub async fn api_instances(&self, f: &ListFilter) -> Result<Vec<CellInstance>, Error> {
        let mut sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE NOT i.deleted");
        let mut n = 1;
        if f.project_id.is_some() {
            sql.push_str(&format!(" AND i.project_id = ${n}"));
            n += 1;
        }
        if !f.vm_states.is_empty() {
            sql.push_str(&format!(
                " AND i.vm_state IN ({})",
                placeholders(n, f.vm_states.len())
            ));
            n += f.vm_states.len();
        }
        if f.after.is_some() {
            sql.push_str(&format!(
                " AND (i.created_at < ${n} OR (i.created_at = ${n} AND i.uuid < ${}))",
                n + 1
            ));
            n += 2;
        }
        sql.push_str(&format!(
            " ORDER BY i.created_at DESC, i.uuid DESC LIMIT ${n}"
        ));
        Ok(with_pool!(self.pool(), p => {
            let mut q = sqlx::query_as(&sql);
            if let Some(pid) = &f.project_id {
                q = q.bind(pid);
            }
            for s in &f.vm_states {
                q = q.bind(s);
            }
            if let Some((at, uuid)) = &f.after {
                q = q.bind(*at).bind(uuid);
            }
            measured("api_instances_list", q.bind(f.limit).fetch_all(p)).await?
        }))
    }

    /// The latest fault of each of `uuids` that has one.
    pub async fn api_faults(&self, uuids: &[String]) -> Result<Vec<CellFault>, Error> {
        let mut out: Vec<CellFault> = Vec::new();
        for chunk in uuids.chunks(CHUNK) {
            let sql = format!(
                "SELECT instance_uuid, code, message, details, created_at FROM instance_faults \
                 WHERE instance_uuid IN ({}) ORDER BY created_at DESC, id DESC",
                placeholders(1, chunk.len())
            );
            let rows: Vec<CellFault> = with_pool!(self.pool(), p => {
                let mut q = sqlx::query_as(&sql);
                for u in chunk {
                    q = q.bind(u);
                }
                measured("api_faults", q.fetch_all(p)).await?
            });
            for r in rows {
                if !out.iter().any(|o| o.instance_uuid == r.instance_uuid) {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    /// Renames a live instance; false when there is none.
    pub async fn api_rename(&self, uuid: &str, name: &str) -> Result<bool, Error> {
        let r = with_pool!(self.pool(), p => measured("api_instance_rename", sqlx::query(
            "UPDATE instances SET display_name = $1, hostname = $1, updated_at = $2 \
             WHERE uuid = $3 AND NOT deleted")
            .bind(name).bind(Utc::now()).bind(uuid).execute(p)).await?.rows_affected());
        Ok(r > 0)
    }

    /// Sets `task_state = deleting` on a live instance and records the
    /// `delete` action; false when there is no live instance.
    pub async fn api_set_deleting(
        &self,
        uuid: &str,
        request_id: &str,
        global_request_id: &str,
        user_id: &str,
        project_id: &str,
    ) -> Result<bool, Error> {
        let t = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let n = measured("api_instance_deleting", sqlx::query(
                "UPDATE instances SET task_state = $1, updated_at = $2 WHERE uuid = $3 AND NOT deleted")
                .bind(fabric::rpc::task_state::DELETING).bind(t).bind(uuid)
                .execute(&mut *tx)).await?.rows_affected();
            if n > 0 {
                measured("api_action_delete", sqlx::query(
                    "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                     user_id, project_id, start_time, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)")
                    .bind(uuid).bind(fabric::rpc::action::DELETE).bind(request_id)
                    .bind(global_request_id).bind(user_id).bind(project_id).bind(t)
                    .execute(&mut *tx)).await?;
            }
            tx.commit().await.map_err(db("commit"))?;
            n > 0
        }))
    }

    /// Marks a live instance deleted without a host being involved (it
    /// never reached one: cell0, or a build deleted while it landed).
    pub async fn api_delete_local(&self, uuid: &str) -> Result<bool, Error> {
        let t = Utc::now();
        let n = with_pool!(self.pool(), p => measured("api_instance_delete_local", sqlx::query(
            "UPDATE instances SET deleted = TRUE, deleted_at = $1, terminated_at = $1, updated_at = $1, \
             vm_state = $2, task_state = NULL WHERE uuid = $3 AND NOT deleted")
            .bind(t).bind(fabric::rpc::vm_state::DELETED).bind(uuid)
            .execute(p)).await?.rows_affected());
        Ok(n > 0)
    }

    /// The API's local delete of a live instance whose compute cannot do
    /// it (its service is down or forced down, or it has no host), as
    /// upstream's API does: in one transaction, marks the instance deleted
    /// with the end state the conductor's `instance_destroyed` writes
    /// (`deleted`, `deleted_at`, `terminated_at`, vm_state `deleted`, no
    /// task, power state NOSTATE, its block device mappings soft-deleted),
    /// records the `delete` action of `record` and its
    /// [`EV_API_LOCAL_DELETE`] event finished with `Success` (`host`: the
    /// instance's host, if any). False, with nothing written, when there is
    /// no live instance.
    pub async fn api_local_delete(
        &self,
        uuid: &str,
        record: &super::server_actions::ActionRecord,
        host: Option<&str>,
    ) -> Result<bool, Error> {
        let t = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let n = measured("api_instance_local_delete", sqlx::query(
                "UPDATE instances SET deleted = TRUE, deleted_at = $1, terminated_at = $1, \
                 updated_at = $1, vm_state = $2, task_state = NULL, power_state = $3 \
                 WHERE uuid = $4 AND NOT deleted")
                .bind(t).bind(fabric::rpc::vm_state::DELETED)
                .bind(fabric::rpc::power_state::NOSTATE as i64).bind(uuid)
                .execute(&mut *tx)).await?.rows_affected();
            if n == 0 {
                tx.rollback().await.map_err(db("rollback"))?;
                false
            } else {
                measured("api_bdm_local_delete", sqlx::query(
                    "UPDATE block_device_mapping SET deleted = TRUE, deleted_at = $1, updated_at = $1 \
                     WHERE instance_uuid = $2 AND NOT deleted")
                    .bind(t).bind(uuid).execute(&mut *tx)).await?;
                let action_id: i64 = measured("api_action_local_delete", sqlx::query_scalar(
                    "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                     user_id, project_id, start_time, finish_time, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7, $7) RETURNING id")
                    .bind(uuid).bind(&record.action).bind(&record.request_id)
                    .bind(&record.global_request_id).bind(&record.user_id)
                    .bind(&record.project_id).bind(t)
                    .fetch_one(&mut *tx)).await?;
                measured("api_event_local_delete", sqlx::query(
                    "INSERT INTO instance_actions_events (action_id, event, host, result, request_id, \
                     global_request_id, start_time, finish_time, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7, $7)")
                    .bind(action_id).bind(EV_API_LOCAL_DELETE).bind(host)
                    .bind(fabric::rpc::action::SUCCESS).bind(&record.request_id)
                    .bind(&record.global_request_id).bind(t)
                    .execute(&mut *tx)).await?;
                tx.commit().await.map_err(db("commit"))?;
                true
            }
        }))
    }

    /// Live compute nodes with their compute service.
    pub async fn compute_hosts(&self) -> Result<Vec<ComputeHost>, Error> {
        Ok(
            with_pool!(self.pool(), p => measured("api_compute_hosts", sqlx::query_as(
            "SELECT n.uuid, n.host, n.hypervisor_hostname, s.disabled, s.forced_down, s.last_seen_up, \
             n.stats \
             FROM compute_nodes n JOIN services s ON s.host = n.host AND s.\"binary\" = $1 \
             AND NOT s.deleted WHERE NOT n.deleted ORDER BY n.host, n.hypervisor_hostname")
            .bind(super::cell::COMPUTE_BINARY).fetch_all(p)).await?),
        )
    }
}
