//! `build_casts` and what the healing reads (issue 31): the builds cast to
//! a host and not finished, the hosts seen dead, the builds past their
//! timeout; and the conditional ERROR that ends a build the healing gives
//! up on.

use chrono::{DateTime, Utc};
use fabric::ids::InstanceUuid;
use fabric::rpc::{task_state as ts, vm_state as vs};
use migrations::BeginWrite;

use super::actions::{insert_fault, record_event};
use super::instances::InstanceRow;
use super::{now, on_db, CellDb};
use crate::error::{db, Result};
use crate::metrics::measured;
use crate::model::{Event, Fault};

/// A build cast to a host: what re-drives it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct BuildCast {
    /// `instance_uuid`.
    pub instance_uuid: String,
    /// The host it was cast to.
    pub host: String,
    /// The encoded [`fabric::rpc::BuildAndRunInstance`].
    pub message: Vec<u8>,
    /// Request id of the create.
    pub request_id: String,
    /// Global request id of the create.
    pub global_request_id: String,
    /// When the cast expires in the host's queue.
    pub expires_at: DateTime<Utc>,
}

/// A compute service seen dead: forced down, or silent since `last_seen_up`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DownService {
    /// Host.
    pub host: String,
    /// Last heartbeat written.
    pub last_seen_up: Option<DateTime<Utc>>,
    /// The operator's switch.
    pub forced_down: bool,
}

/// A building instance past its build timeout.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OverdueBuild {
    /// `uuid`.
    pub uuid: String,
    /// Its host (none: never cast).
    pub host: Option<String>,
    /// When the create was accepted.
    pub created_at: DateTime<Utc>,
}

/// An instance on a host with a task under way (not a build).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct HeldTask {
    /// `uuid`.
    pub uuid: String,
    /// `task_state` (never NULL here).
    pub task_state: String,
}

const CAST_COLUMNS: &str =
    "b.instance_uuid, b.host, b.message, b.request_id, b.global_request_id, b.expires_at";

impl CellDb {
    /// Records (or replaces, on a reschedule) the build cast to `host`.
    pub async fn record_build_cast(
        &self,
        instance: &str,
        host: &str,
        message: &[u8],
        request_id: &str,
        global_request_id: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<()> {
        let sql = "INSERT INTO build_casts \
             (instance_uuid, host, message, request_id, global_request_id, cast_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (instance_uuid) DO UPDATE SET host = excluded.host, \
             message = excluded.message, cast_at = excluded.cast_at, expires_at = excluded.expires_at";
        on_db!(self, p => measured("build_cast_record", sqlx::query(sql)
            .bind(instance).bind(host).bind(message).bind(request_id).bind(global_request_id)
            .bind(now()).bind(expires_at).execute(p)).await.map_err(db("build_cast_record"))?.rows_affected());
        Ok(())
    }

    /// The recorded cast of `instance`, if any.
    pub async fn build_cast(&self, instance: &str) -> Result<Option<BuildCast>> {
        let sql = format!("SELECT {CAST_COLUMNS} FROM build_casts b WHERE b.instance_uuid = $1");
        Ok(
            on_db!(self, p => measured("build_cast_get", sqlx::query_as(&sql)
            .bind(instance).fetch_optional(p)).await.map_err(db("build_cast_get"))?),
        )
    }

    /// Compute services of `binary` forced down or silent since before
    /// `cutoff` (never seen counts as silent).
    pub async fn down_services(
        &self,
        binary: &str,
        cutoff: DateTime<Utc>,
    ) -> Result<Vec<DownService>> {
        let sql = "SELECT host, last_seen_up, forced_down FROM services \
             WHERE \"binary\" = $1 AND NOT deleted \
             AND (forced_down OR last_seen_up IS NULL OR last_seen_up < $2) ORDER BY host";
        Ok(
            on_db!(self, p => measured("services_down", sqlx::query_as(sql)
            .bind(binary).bind(cutoff).fetch_all(p)).await.map_err(db("services_down"))?),
        )
    }

    /// Unfinished builds cast to `host` that are still on it.
    pub async fn build_casts_on(&self, host: &str, limit: i64) -> Result<Vec<BuildCast>> {
        let sql = format!(
            "SELECT {CAST_COLUMNS} FROM build_casts b JOIN instances i ON i.uuid = b.instance_uuid \
             WHERE b.host = $1 AND NOT i.deleted AND i.vm_state = $2 AND i.host = b.host \
             ORDER BY b.cast_at LIMIT $3"
        );
        Ok(
            on_db!(self, p => measured("build_casts_on_host", sqlx::query_as(&sql)
            .bind(host).bind(vs::BUILDING).bind(limit).fetch_all(p)).await
            .map_err(db("build_casts_on_host"))?),
        )
    }

    /// Builds whose cast expired before `cutoff` while the instance still
    /// waits in `task_state` (no compute ever took it), and those whose
    /// cast was recorded unsent (`expires_at` ≤ `cast_at`) whenever.
    pub async fn expired_build_casts(
        &self,
        cutoff: DateTime<Utc>,
        task_state: &str,
        limit: i64,
    ) -> Result<Vec<BuildCast>> {
        let sql = format!(
            "SELECT {CAST_COLUMNS} FROM build_casts b JOIN instances i ON i.uuid = b.instance_uuid \
             WHERE (b.expires_at < $1 OR b.expires_at <= b.cast_at) AND NOT i.deleted AND i.vm_state = $2 AND i.task_state = $3 \
             AND i.host = b.host ORDER BY b.expires_at LIMIT $4"
        );
        Ok(
            on_db!(self, p => measured("build_casts_expired", sqlx::query_as(&sql)
            .bind(cutoff).bind(vs::BUILDING).bind(task_state).bind(limit).fetch_all(p)).await
            .map_err(db("build_casts_expired"))?),
        )
    }

    /// Instances on `host` (live, not building) whose task state is set:
    /// the tasks a host seen dead holds.
    pub async fn held_tasks(&self, host: &str, limit: i64) -> Result<Vec<HeldTask>> {
        let sql = "SELECT uuid, task_state FROM instances WHERE host = $1 AND NOT deleted \
             AND task_state IS NOT NULL AND vm_state <> $2 ORDER BY updated_at LIMIT $3";
        Ok(
            on_db!(self, p => measured("instances_held_tasks", sqlx::query_as(sql)
            .bind(host).bind(vs::BUILDING).bind(limit).fetch_all(p)).await
            .map_err(db("instances_held_tasks"))?),
        )
    }

    /// Live instances in `deleting` on a host that no change has touched
    /// since `cutoff` (a terminate cast lost, or expired unread in a live
    /// host's queue), oldest first: `(uuid, host)`.
    pub async fn stale_deletes(
        &self,
        cutoff: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<(String, String)>> {
        let sql = "SELECT uuid, host FROM instances WHERE NOT deleted AND task_state = $1 \
             AND host IS NOT NULL AND updated_at < $2 ORDER BY updated_at LIMIT $3";
        Ok(
            on_db!(self, p => measured("instances_stale_deletes", sqlx::query_as(sql)
            .bind(ts::DELETING).bind(cutoff).bind(limit).fetch_all(p)).await
            .map_err(db("instances_stale_deletes"))?),
        )
    }

    /// Takes the re-send of a stale delete (see
    /// [`CellDb::stale_deletes`]): touches `updated_at` while the instance
    /// is still deleting and untouched since `cutoff`, so that one pass of
    /// one conductor re-sends it, once per period. Whether it was taken.
    pub async fn take_stale_delete(&self, uuid: &str, cutoff: DateTime<Utc>) -> Result<bool> {
        let sql = "UPDATE instances SET updated_at = $1 WHERE uuid = $2 AND deleted IS FALSE \
             AND task_state = $3 AND updated_at < $4";
        let n = on_db!(self, p => measured("instances_take_stale_delete", sqlx::query(sql)
            .bind(Utc::now()).bind(uuid).bind(ts::DELETING).bind(cutoff).execute(p)).await
            .map_err(db("instances_take_stale_delete"))?
            .rows_affected());
        Ok(n > 0)
    }

    /// Removes the casts of builds that ended (ACTIVE, ERROR, deleted).
    /// Returns how many went.
    pub async fn forget_finished_builds(&self) -> Result<u64> {
        let sql = "DELETE FROM build_casts WHERE NOT EXISTS (SELECT 1 FROM instances i \
             WHERE i.uuid = build_casts.instance_uuid AND NOT i.deleted AND i.vm_state = $1)";
        Ok(
            on_db!(self, p => measured("build_casts_forget", sqlx::query(sql)
            .bind(vs::BUILDING).execute(p)).await.map_err(db("build_casts_forget"))?
            .rows_affected()),
        )
    }

    /// Building instances created before `cutoff`, oldest first.
    pub async fn overdue_builds(
        &self,
        cutoff: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<OverdueBuild>> {
        let sql = "SELECT uuid, host, created_at FROM instances \
             WHERE vm_state = $1 AND NOT deleted AND created_at < $2 ORDER BY created_at LIMIT $3";
        Ok(
            on_db!(self, p => measured("instances_overdue", sqlx::query_as(sql)
            .bind(vs::BUILDING).bind(cutoff).bind(limit).fetch_all(p)).await
            .map_err(db("instances_overdue"))?),
        )
    }

    /// Ends a build in ERROR with `fault` and `events`, in one transaction,
    /// only if it is still building (on `host`, when given): a build that
    /// went on meanwhile (ACTIVE, rescheduled, deleted) is left alone and
    /// `None` is answered.
    pub async fn fail_build(
        &self,
        uuid: InstanceUuid,
        host: Option<&str>,
        fault: &Fault,
        events: &[Event],
    ) -> Result<Option<InstanceRow>> {
        let sql = format!(
            "UPDATE instances SET vm_state = $1, task_state = NULL, updated_at = $2 \
             WHERE uuid = $3 AND deleted IS FALSE AND vm_state = $4 \
             AND ($5 IS NULL OR host = $5) RETURNING {}",
            super::instances::COLUMNS
        );
        let key = uuid.to_string();
        Ok(on_db!(self, p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let row: Option<InstanceRow> = measured("instance_fail_build", sqlx::query_as(&sql)
                .bind(vs::ERROR).bind(now()).bind(&key).bind(vs::BUILDING).bind(host)
                .fetch_optional(&mut *tx)).await.map_err(db("instance_fail_build"))?;
            if row.is_some() {
                insert_fault!(tx, &key, fault);
                for ev in events {
                    record_event!(tx, ev);
                }
            }
            tx.commit().await.map_err(db("commit"))?;
            row
        }))
    }
}
