//! The statements on a cell database behind the Compute API's server
//! actions, instance actions, server metadata and server tags.
//!
//! As upstream, the API layer writes these itself: an action's task state
//! (`powering-off`, …) is set with a compare-and-set on the vm_state, the
//! task state and the lock, in the same transaction as the action's
//! `instance_actions` row; the compute then works through the cell
//! conductor. Metadata and tags are plain rows of the instance.

use chrono::{DateTime, Utc};
use migrations::BeginWrite;

use super::{placeholders, with_pool, CellDb, CHUNK};
use crate::metrics::measured;
use crate::Error;

fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |source| Error::Db { op, source }
}

/// Who and which request an `instance_actions` row records.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionRecord {
    /// The action's name (`stop`, `reboot`, …).
    pub action: String,
    /// Request id (the API request).
    pub request_id: String,
    /// Global request id.
    pub global_request_id: String,
    /// The caller.
    pub user_id: String,
    /// The caller's project.
    pub project_id: String,
}

/// The fields a rebuild changes with its task state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RebuildChange {
    /// The new image.
    pub image_ref: String,
    /// A new display name.
    pub name: Option<String>,
    /// New metadata (replaces all of it) when given.
    pub metadata: Option<Vec<(String, String)>>,
    /// `accessIPv4` when given.
    pub access_ip_v4: Option<String>,
    /// `accessIPv6` when given.
    pub access_ip_v6: Option<String>,
    /// The description (2.19) when given; `Some(None)` clears it.
    pub description: Option<Option<String>>,
    /// The key pair (2.54) when given: its name and public key, or
    /// `Some(None)` for none.
    pub key: Option<Option<(String, String)>>,
    /// The user data (2.57) when given; `Some(None)` clears it.
    pub user_data: Option<Option<String>>,
    /// The hostname (2.90) when given.
    pub hostname: Option<String>,
    /// The trusted certificates (2.63) when given; `Some(None)` removes
    /// them (`instance_extra.trusted_certs`, a JSON list).
    pub trusted_certs: Option<Option<Vec<String>>>,
}

/// What a rebuild sets beside the task state: `$4` onwards, bound in
/// this order by [`CellDb::api_start_action`].
const REBUILD_SETS: &str = ", image_ref = $4, display_name = COALESCE($5, display_name), \
    access_ip_v4 = COALESCE($6, access_ip_v4), access_ip_v6 = COALESCE($7, access_ip_v6), \
    display_description = CASE WHEN $8 THEN $9 ELSE display_description END, \
    key_name = CASE WHEN $10 THEN $11 ELSE key_name END, \
    key_data = CASE WHEN $10 THEN $12 ELSE key_data END, \
    user_data = CASE WHEN $13 THEN $14 ELSE user_data END, \
    hostname = COALESCE($15, hostname)";
/// The parameters [`REBUILD_SETS`] takes.
const REBUILD_PARAMS: usize = 12;

/// A server action to start: the states it is allowed from and the task
/// state it sets.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionStart {
    /// The instance.
    pub uuid: String,
    /// Allowed vm_states.
    pub vm_states: Vec<String>,
    /// Allowed task states (`None` = NULL).
    pub task_states: Vec<Option<String>>,
    /// The task state to set.
    pub new_task_state: String,
    /// Whether a locked instance may be acted on (an admin's call).
    pub ignore_lock: bool,
    /// The action row.
    pub record: ActionRecord,
    /// A rebuild's changes.
    pub rebuild: Option<RebuildChange>,
}

/// Why an action could not start.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionRefused {
    /// No live instance.
    NotFound,
    /// Locked, and the caller may not ignore it.
    Locked,
    /// The vm_state is not an allowed one (the current value).
    VmState(String),
    /// The task state is not an allowed one (the current value).
    TaskState(Option<String>),
}

/// An `instance_actions` row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct InstanceActionRow {
    /// `id`.
    pub id: i64,
    /// `action`.
    pub action: String,
    /// `instance_uuid`.
    pub instance_uuid: String,
    /// `request_id`.
    pub request_id: String,
    /// `user_id`.
    pub user_id: Option<String>,
    /// `project_id`.
    pub project_id: Option<String>,
    /// `start_time`.
    pub start_time: Option<DateTime<Utc>>,
    /// `message`.
    pub message: Option<String>,
    /// `created_at`.
    pub created_at: DateTime<Utc>,
    /// `updated_at`.
    pub updated_at: Option<DateTime<Utc>>,
}

/// An `instance_actions_events` row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct InstanceActionEventRow {
    /// `event`.
    pub event: String,
    /// `start_time`.
    pub start_time: Option<DateTime<Utc>>,
    /// `finish_time`.
    pub finish_time: Option<DateTime<Utc>>,
    /// `result`.
    pub result: Option<String>,
    /// `traceback`.
    pub traceback: Option<String>,
    /// `host`.
    pub host: Option<String>,
    /// `details`.
    pub details: Option<String>,
}

/// A page of an instance's actions: newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActionsFilter {
    /// At most this many.
    pub limit: Option<i64>,
    /// Only actions older than this one (`created_at`, `id`).
    pub after: Option<(DateTime<Utc>, i64)>,
    /// Only actions updated at or after.
    pub changes_since: Option<DateTime<Utc>>,
    /// Only actions updated at or before.
    pub changes_before: Option<DateTime<Utc>>,
}

/// What a metadata or tag write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written.
    Done,
    /// Written, and the item did not exist before (tags).
    Created,
    /// No live instance.
    NotFound,
    /// It would leave more than the allowed number of items (rolled back).
    TooMany,
}

const ACTION_COLUMNS: &str = "id, action, instance_uuid, request_id, user_id, project_id, \
    start_time, message, created_at, updated_at";

const LIVE: &str = "SELECT COUNT(*) FROM instances WHERE uuid = $1 AND deleted IS FALSE";

impl CellDb {
    /// Starts a server action: sets the task state (and a rebuild's image,
    /// name and metadata) if the vm_state, task state and lock allow it, and
    /// records the action, in one transaction.
    pub async fn api_start_action(
        &self,
        a: &ActionStart,
    ) -> Result<Result<(), ActionRefused>, Error> {
        let t = Utc::now();
        let nv = a.vm_states.len();
        let null_ok = a.task_states.iter().any(Option::is_none);
        let named: Vec<&String> = a.task_states.iter().flatten().collect();
        let mut n = 4;
        let mut sql = String::from("UPDATE instances SET task_state = $1, updated_at = $2");
        if a.rebuild.is_some() {
            sql.push_str(REBUILD_SETS);
            n += REBUILD_PARAMS;
        }
        sql.push_str(&format!(
            " WHERE uuid = $3 AND deleted IS FALSE AND vm_state IN ({})",
            placeholders(n, nv)
        ));
        n += nv;
        let mut task_cond = Vec::new();
        if null_ok {
            task_cond.push("task_state IS NULL".to_owned());
        }
        if !named.is_empty() {
            task_cond.push(format!("task_state IN ({})", placeholders(n, named.len())));
            n += named.len();
        }
        sql.push_str(&format!(" AND ({})", task_cond.join(" OR ")));
        if !a.ignore_lock {
            sql.push_str(" AND NOT locked");
        }
        let _ = n;
        let r = &a.record;
        let refused = with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let mut q = sqlx::query(&sql).bind(&a.new_task_state).bind(t).bind(&a.uuid);
            if let Some(rb) = &a.rebuild {
                let key = rb.key.as_ref().map(|k| k.as_ref().map(|(n, d)| (n.as_str(), d.as_str())));
                q = q.bind(&rb.image_ref).bind(&rb.name)
                    .bind(&rb.access_ip_v4).bind(&rb.access_ip_v6)
                    .bind(rb.description.is_some()).bind(rb.description.clone().flatten())
                    .bind(key.is_some()).bind(key.flatten().map(|k| k.0))
                    .bind(key.flatten().map(|k| k.1))
                    .bind(rb.user_data.is_some()).bind(rb.user_data.clone().flatten())
                    .bind(&rb.hostname);
            }
            for v in &a.vm_states {
                q = q.bind(v);
            }
            for s in &named {
                q = q.bind(*s);
            }
            let changed = measured("api_action_task_state", q.execute(&mut *tx)).await?.rows_affected();
            if changed == 0 {
                let cur: Option<(Option<String>, Option<String>, bool)> = measured(
                    "api_action_refused",
                    sqlx::query_as("SELECT vm_state, task_state, locked FROM instances \
                                    WHERE uuid = $1 AND deleted IS FALSE")
                        .bind(&a.uuid).fetch_optional(&mut *tx)).await?;
                tx.rollback().await.map_err(db("rollback"))?;
                Some(match cur {
                    None => ActionRefused::NotFound,
                    Some((vm, _, _)) if !a.vm_states.iter().any(|v| Some(v) == vm.as_ref()) => {
                        ActionRefused::VmState(vm.unwrap_or_default())
                    }
                    Some((_, task, _))
                        if !a.task_states.iter().any(|s| s.as_deref() == task.as_deref()) =>
                    {
                        ActionRefused::TaskState(task)
                    }
                    Some((_, _, true)) => ActionRefused::Locked,
                    // Changed between the two statements: report what is seen now.
                    Some((_, task, false)) => ActionRefused::TaskState(task),
                })
            } else {
                if let Some(RebuildChange { trusted_certs: Some(certs), .. }) = &a.rebuild {
                    let json = certs.as_ref().map(|c| serde_json::to_string(c).unwrap_or_default());
                    measured("api_trusted_certs_set", sqlx::query(
                        "UPDATE instance_extra SET trusted_certs = $1, updated_at = $2 \
                         WHERE instance_uuid = $3")
                        .bind(json).bind(t).bind(&a.uuid).execute(&mut *tx)).await?;
                }
                if let Some(RebuildChange { metadata: Some(items), .. }) = &a.rebuild {
                    measured("api_metadata_clear", sqlx::query(
                        "DELETE FROM instance_metadata WHERE instance_uuid = $1")
                        .bind(&a.uuid).execute(&mut *tx)).await?;
                    for (k, v) in items {
                        measured("api_metadata_insert", sqlx::query(
                            "INSERT INTO instance_metadata (instance_uuid, key, value, created_at) \
                             VALUES ($1, $2, $3, $4)")
                            .bind(&a.uuid).bind(k).bind(v).bind(t)
                            .execute(&mut *tx)).await?;
                    }
                }
                measured("api_action_insert", sqlx::query(
                    "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                     user_id, project_id, start_time, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7)")
                    .bind(&a.uuid).bind(&r.action).bind(&r.request_id).bind(&r.global_request_id)
                    .bind(&r.user_id).bind(&r.project_id).bind(t)
                    .execute(&mut *tx)).await?;
                tx.commit().await.map_err(db("commit"))?;
                None
            }
        });
        Ok(match refused {
            Some(r) => Err(r),
            None => Ok(()),
        })
    }

    /// Clears `task` (the task state an action set) when the action could
    /// not be sent to its compute; false when the task state moved on.
    pub async fn api_revert_task_state(&self, uuid: &str, task: &str) -> Result<bool, Error> {
        let n = with_pool!(self.pool(), p => measured("api_action_revert", sqlx::query(
            "UPDATE instances SET task_state = NULL, updated_at = $1 \
             WHERE uuid = $2 AND deleted IS FALSE AND task_state = $3")
            .bind(Utc::now()).bind(uuid).bind(task).execute(p)).await?.rows_affected());
        Ok(n > 0)
    }

    /// Locks (`Some((locked_by, reason))`) or unlocks (`None`) a live
    /// instance and records the `lock` / `unlock` action, in one
    /// transaction. The reason lives in `instance_system_metadata`, as
    /// upstream. False when there is no live instance.
    pub async fn api_set_lock(
        &self,
        uuid: &str,
        lock: Option<(&str, Option<&str>)>,
        record: &ActionRecord,
    ) -> Result<bool, Error> {
        let t = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let n = measured("api_instance_lock", sqlx::query(
                "UPDATE instances SET locked = $1, locked_by = $2, updated_at = $3 \
                 WHERE uuid = $4 AND deleted IS FALSE")
                .bind(lock.is_some()).bind(lock.map(|l| l.0)).bind(t).bind(uuid)
                .execute(&mut *tx)).await?.rows_affected();
            if n > 0 {
                measured("api_locked_reason_clear", sqlx::query(
                    "DELETE FROM instance_system_metadata WHERE instance_uuid = $1 AND key = 'locked_reason'")
                    .bind(uuid).execute(&mut *tx)).await?;
                if let Some((_, Some(reason))) = lock {
                    measured("api_locked_reason_set", sqlx::query(
                        "INSERT INTO instance_system_metadata (instance_uuid, key, value, created_at) \
                         VALUES ($1, 'locked_reason', $2, $3)")
                        .bind(uuid).bind(reason).bind(t).execute(&mut *tx)).await?;
                }
                measured("api_action_insert", sqlx::query(
                    "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                     user_id, project_id, start_time, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7)")
                    .bind(uuid).bind(&record.action).bind(&record.request_id)
                    .bind(&record.global_request_id).bind(&record.user_id).bind(&record.project_id)
                    .bind(t).execute(&mut *tx)).await?;
            }
            tx.commit().await.map_err(db("commit"))?;
            n > 0
        }))
    }

    /// `os-resetState`: sets the vm_state of a live instance and clears its
    /// task state, and records the action, in one transaction (Nova's
    /// `admin_state_reset` save: no state is expected). False when there is
    /// no live instance.
    pub async fn api_reset_state(
        &self,
        uuid: &str,
        vm_state: &str,
        record: &ActionRecord,
    ) -> Result<bool, Error> {
        let t = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let n = measured("api_reset_state", sqlx::query(
                "UPDATE instances SET vm_state = $1, task_state = NULL, updated_at = $2 \
                 WHERE uuid = $3 AND deleted IS FALSE")
                .bind(vm_state).bind(t).bind(uuid)
                .execute(&mut *tx)).await?.rows_affected();
            if n > 0 {
                measured("api_action_insert", sqlx::query(
                    "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                     user_id, project_id, start_time, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7)")
                    .bind(uuid).bind(&record.action).bind(&record.request_id)
                    .bind(&record.global_request_id).bind(&record.user_id).bind(&record.project_id)
                    .bind(t).execute(&mut *tx)).await?;
            }
            tx.commit().await.map_err(db("commit"))?;
            n > 0
        }))
    }

    /// The server password the metadata service stored (Nova's
    /// `password_0` … `password_3` system metadata, joined in key order;
    /// empty when unset). `None` when there is no live instance.
    pub async fn api_server_password(&self, uuid: &str) -> Result<Option<String>, Error> {
        Ok(with_pool!(self.pool(), p => {
            let live: i64 = measured("api_password_live", sqlx::query_scalar(LIVE)
                .bind(uuid).fetch_one(p)).await?;
            if live == 0 {
                None
            } else {
                let parts: Vec<(String, Option<String>)> = measured("api_password", sqlx::query_as(
                    "SELECT key, value FROM instance_system_metadata \
                     WHERE instance_uuid = $1 AND key IN ('password_0', 'password_1', \
                     'password_2', 'password_3') ORDER BY key")
                    .bind(uuid).fetch_all(p)).await?;
                Some(parts.into_iter().filter_map(|(_, v)| v).collect::<String>())
            }
        }))
    }

    /// Clears the server password (`DELETE …/os-server-password`): the
    /// `password_*` system metadata of a live instance goes. False when
    /// there is no live instance.
    pub async fn api_clear_server_password(&self, uuid: &str) -> Result<bool, Error> {
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let live: i64 = measured("api_password_live", sqlx::query_scalar(LIVE)
                .bind(uuid).fetch_one(&mut *tx)).await?;
            if live > 0 {
                measured("api_password_clear", sqlx::query(
                    "DELETE FROM instance_system_metadata \
                     WHERE instance_uuid = $1 AND key IN ('password_0', 'password_1', \
                     'password_2', 'password_3')")
                    .bind(uuid).execute(&mut *tx)).await?;
            }
            tx.commit().await.map_err(db("commit"))?;
            live > 0
        }))
    }

    /// The actions of an instance (deleted or not), newest first.
    pub async fn api_instance_actions(
        &self,
        uuid: &str,
        f: &ActionsFilter,
    ) -> Result<Vec<InstanceActionRow>, Error> {
        let mut sql =
            format!("SELECT {ACTION_COLUMNS} FROM instance_actions WHERE instance_uuid = $1");
        let mut n = 2;
        if f.after.is_some() {
            sql.push_str(&format!(
                " AND (created_at < ${n} OR (created_at = ${n} AND id < ${}))",
                n + 1
            ));
            n += 2;
        }
        if f.changes_since.is_some() {
            sql.push_str(&format!(" AND COALESCE(updated_at, created_at) >= ${n}"));
            n += 1;
        }
        if f.changes_before.is_some() {
            sql.push_str(&format!(" AND COALESCE(updated_at, created_at) <= ${n}"));
            n += 1;
        }
        sql.push_str(" ORDER BY created_at DESC, id DESC");
        if f.limit.is_some() {
            sql.push_str(&format!(" LIMIT ${n}"));
        }
        Ok(with_pool!(self.pool(), p => {
            let mut q = sqlx::query_as(&sql).bind(uuid);
            if let Some((at, id)) = &f.after {
                q = q.bind(*at).bind(*id);
            }
            if let Some(t) = f.changes_since {
                q = q.bind(t);
            }
            if let Some(t) = f.changes_before {
                q = q.bind(t);
            }
            if let Some(l) = f.limit {
                q = q.bind(l);
            }
            measured("api_instance_actions", q.fetch_all(p)).await?
        }))
    }

    /// One action of an instance by its request id.
    pub async fn api_instance_action(
        &self,
        uuid: &str,
        request_id: &str,
    ) -> Result<Option<InstanceActionRow>, Error> {
        let sql = format!(
            "SELECT {ACTION_COLUMNS} FROM instance_actions WHERE instance_uuid = $1 AND request_id = $2"
        );
        Ok(with_pool!(self.pool(), p => measured("api_instance_action",
            sqlx::query_as(&sql).bind(uuid).bind(request_id).fetch_optional(p)).await?))
    }

    /// The events of an action, newest first (as upstream).
    pub async fn api_action_events(
        &self,
        action_id: i64,
    ) -> Result<Vec<InstanceActionEventRow>, Error> {
        Ok(
            with_pool!(self.pool(), p => measured("api_action_events", sqlx::query_as(
            "SELECT event, start_time, finish_time, result, traceback, host, details \
             FROM instance_actions_events WHERE action_id = $1 ORDER BY created_at DESC, id DESC")
            .bind(action_id).fetch_all(p)).await?),
        )
    }

    // ------------------------------------------------------------ metadata

    /// The metadata of each of `uuids`: `(uuid, key, value)`, by key.
    pub async fn api_metadata(
        &self,
        uuids: &[String],
    ) -> Result<Vec<(String, String, String)>, Error> {
        let mut out = Vec::new();
        for chunk in uuids.chunks(CHUNK) {
            let sql = format!(
                "SELECT instance_uuid, key, COALESCE(value, '') FROM instance_metadata \
                 WHERE instance_uuid IN ({}) ORDER BY instance_uuid, key",
                placeholders(1, chunk.len())
            );
            let rows: Vec<(String, String, String)> = with_pool!(self.pool(), p => {
                let mut q = sqlx::query_as(&sql);
                for u in chunk {
                    q = q.bind(u);
                }
                measured("api_metadata", q.fetch_all(p)).await?
            });
            out.extend(rows);
        }
        Ok(out)
    }

    /// [`Self::api_metadata`] and [`Self::api_tags`] of `uuids`, and the
    /// trusted certificates (JSON lists) of those that have some, in one
    /// statement per chunk (what each list page reads).
    #[allow(clippy::type_complexity)]
    pub async fn api_metadata_and_tags(
        &self,
        uuids: &[String],
    ) -> Result<
        (
            Vec<(String, String, String)>,
            Vec<(String, String)>,
            Vec<(String, String)>,
        ),
        Error,
    > {
        const SQL: &str = "SELECT 'm', instance_uuid, key, COALESCE(value, '') \
            FROM instance_metadata WHERE instance_uuid IN ({list}) UNION ALL \
            SELECT 't', resource_id, tag, '' FROM tags WHERE resource_id IN ({list}) UNION ALL \
            SELECT 'c', instance_uuid, trusted_certs, '' FROM instance_extra \
            WHERE instance_uuid IN ({list}) AND trusted_certs IS NOT NULL \
            ORDER BY 1, 2, 3";
        let mut rows: Vec<(String, String, String, String)> = Vec::new();
        match self.pool() {
            // One statement, the uuids bound as one array (a page's worth of
            // `IN` placeholders is a statement text per page size, each
            // planned anew).
            super::Pool::Postgres(p) => {
                let sql = SQL.replace("IN ({list})", "= ANY($1)");
                rows = measured(
                    "api_metadata_and_tags",
                    sqlx::query_as(&sql).bind(uuids).fetch_all(p),
                )
                .await?;
            }
            super::Pool::Sqlite(p) => {
                for chunk in uuids.chunks(CHUNK) {
                    let sql = SQL.replace("{list}", &placeholders(1, chunk.len()));
                    let mut q = sqlx::query_as(&sql);
                    for u in chunk {
                        q = q.bind(u);
                    }
                    rows.extend(measured("api_metadata_and_tags", q.fetch_all(p)).await?);
                }
            }
        }
        let (mut meta, mut tags, mut certs) = (Vec::new(), Vec::new(), Vec::new());
        for (kind, uuid, k, v) in rows {
            match kind.as_str() {
                "m" => meta.push((uuid, k, v)),
                "t" => tags.push((uuid, k)),
                _ => certs.push((uuid, k)),
            }
        }
        Ok((meta, tags, certs))
    }

    /// Sets metadata items of a live instance (`replace`: the items become
    /// all of its metadata), refusing to leave more than `max_items`.
    pub async fn api_metadata_set(
        &self,
        uuid: &str,
        items: &[(String, String)],
        replace: bool,
        max_items: i64,
    ) -> Result<WriteOutcome, Error> {
        let t = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let live: i64 = measured("api_instance_live", sqlx::query_scalar(LIVE)
                .bind(uuid).fetch_one(&mut *tx)).await?;
            if live == 0 {
                tx.rollback().await.map_err(db("rollback"))?;
                return Ok(WriteOutcome::NotFound);
            }
            if replace {
                measured("api_metadata_clear", sqlx::query(
                    "DELETE FROM instance_metadata WHERE instance_uuid = $1")
                    .bind(uuid).execute(&mut *tx)).await?;
            }
            for (k, v) in items {
                measured("api_metadata_upsert", sqlx::query(
                    "INSERT INTO instance_metadata (instance_uuid, key, value, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (instance_uuid, key) \
                     DO UPDATE SET value = excluded.value, updated_at = excluded.created_at")
                    .bind(uuid).bind(k).bind(v).bind(t)
                    .execute(&mut *tx)).await?;
            }
            let count: i64 = measured("api_metadata_count", sqlx::query_scalar(
                "SELECT COUNT(*) FROM instance_metadata WHERE instance_uuid = $1")
                .bind(uuid).fetch_one(&mut *tx)).await?;
            if count > max_items {
                tx.rollback().await.map_err(db("rollback"))?;
                return Ok(WriteOutcome::TooMany);
            }
            measured("api_instance_touch", sqlx::query(
                "UPDATE instances SET updated_at = $1 WHERE uuid = $2")
                .bind(t).bind(uuid).execute(&mut *tx)).await?;
            tx.commit().await.map_err(db("commit"))?;
            WriteOutcome::Done
        }))
    }

    /// Deletes one metadata item; false when the instance or key is absent.
    pub async fn api_metadata_delete(&self, uuid: &str, key: &str) -> Result<bool, Error> {
        let n = with_pool!(self.pool(), p => measured("api_metadata_delete", sqlx::query(
            "DELETE FROM instance_metadata WHERE instance_uuid = $1 AND key = $2 \
             AND EXISTS (SELECT 1 FROM instances WHERE uuid = $1 AND deleted IS FALSE)")
            .bind(uuid).bind(key).execute(p)).await?.rows_affected());
        Ok(n > 0)
    }

    // ---------------------------------------------------------------- tags

    /// The tags of each of `uuids`: `(uuid, tag)`, by tag.
    pub async fn api_tags(&self, uuids: &[String]) -> Result<Vec<(String, String)>, Error> {
        let mut out = Vec::new();
        for chunk in uuids.chunks(CHUNK) {
            let sql = format!(
                "SELECT resource_id, tag FROM tags WHERE resource_id IN ({}) ORDER BY resource_id, tag",
                placeholders(1, chunk.len())
            );
            let rows: Vec<(String, String)> = with_pool!(self.pool(), p => {
                let mut q = sqlx::query_as(&sql);
                for u in chunk {
                    q = q.bind(u);
                }
                measured("api_tags", q.fetch_all(p)).await?
            });
            out.extend(rows);
        }
        Ok(out)
    }

    /// Replaces every tag of a live instance (`tags` already deduplicated
    /// and at most the limit).
    pub async fn api_tags_replace(
        &self,
        uuid: &str,
        tags: &[String],
    ) -> Result<WriteOutcome, Error> {
        let t = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let live: i64 = measured("api_instance_live", sqlx::query_scalar(LIVE)
                .bind(uuid).fetch_one(&mut *tx)).await?;
            if live == 0 {
                tx.rollback().await.map_err(db("rollback"))?;
                return Ok(WriteOutcome::NotFound);
            }
            measured("api_tags_clear", sqlx::query("DELETE FROM tags WHERE resource_id = $1")
                .bind(uuid).execute(&mut *tx)).await?;
            for tag in tags {
                measured("api_tag_insert", sqlx::query(
                    "INSERT INTO tags (resource_id, tag, created_at) VALUES ($1, $2, $3)")
                    .bind(uuid).bind(tag).bind(t).execute(&mut *tx)).await?;
            }
            tx.commit().await.map_err(db("commit"))?;
            WriteOutcome::Done
        }))
    }

    /// Adds one tag to a live instance, keeping at most `max` tags.
    pub async fn api_tag_add(
        &self,
        uuid: &str,
        tag: &str,
        max: i64,
    ) -> Result<WriteOutcome, Error> {
        let t = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let live: i64 = measured("api_instance_live", sqlx::query_scalar(LIVE)
                .bind(uuid).fetch_one(&mut *tx)).await?;
            if live == 0 {
                tx.rollback().await.map_err(db("rollback"))?;
                return Ok(WriteOutcome::NotFound);
            }
            let n = measured("api_tag_insert", sqlx::query(
                "INSERT INTO tags (resource_id, tag, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (resource_id, tag) DO NOTHING")
                .bind(uuid).bind(tag).bind(t).execute(&mut *tx)).await?.rows_affected();
            let count: i64 = measured("api_tags_count", sqlx::query_scalar(
                "SELECT COUNT(*) FROM tags WHERE resource_id = $1")
                .bind(uuid).fetch_one(&mut *tx)).await?;
            if count > max {
                tx.rollback().await.map_err(db("rollback"))?;
                return Ok(WriteOutcome::TooMany);
            }
            tx.commit().await.map_err(db("commit"))?;
            if n > 0 { WriteOutcome::Created } else { WriteOutcome::Done }
        }))
    }

    /// Deletes one tag (`Some`) or all of them (`None`); false when the
    /// instance (or the one tag) is absent.
    pub async fn api_tag_delete(&self, uuid: &str, tag: Option<&str>) -> Result<bool, Error> {
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let live: i64 = measured("api_instance_live", sqlx::query_scalar(LIVE)
                .bind(uuid).fetch_one(&mut *tx)).await?;
            let ok = if live == 0 {
                false
            } else {
                match tag {
                    Some(tag) => measured("api_tag_delete", sqlx::query(
                        "DELETE FROM tags WHERE resource_id = $1 AND tag = $2")
                        .bind(uuid).bind(tag).execute(&mut *tx)).await?.rows_affected() > 0,
                    None => {
                        measured("api_tags_clear", sqlx::query("DELETE FROM tags WHERE resource_id = $1")
                            .bind(uuid).execute(&mut *tx)).await?;
                        true
                    }
                }
            };
            tx.commit().await.map_err(db("commit"))?;
            ok
        }))
    }
}
