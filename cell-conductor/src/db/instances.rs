//! `instances`: updates with task-state checks, ERROR with a fault, soft
//! delete; and the create used by the API layer's conductor-free path (and
//! the tests).

use chrono::{DateTime, Utc};
use fabric::ids::InstanceUuid;
use fabric::rpc::{self, task_state as ts, vm_state as vs, FlavorResources};
use migrations::BeginWrite;

use super::actions::{insert_fault, record_event};
use super::{now, on_db, CellDb};
use crate::error::{db, ConductorError, Result};
use crate::metrics::measured;
use crate::model::{Event, Fault, InstanceChange, Phase};

/// An instance row (the columns the boot flow touches).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct InstanceRow {
    /// `uuid`.
    pub uuid: String,
    /// `project_id`.
    pub project_id: String,
    /// `user_id`.
    pub user_id: String,
    /// `vm_state`.
    pub vm_state: Option<String>,
    /// `task_state`.
    pub task_state: Option<String>,
    /// `power_state`.
    pub power_state: Option<i64>,
    /// `host`.
    pub host: Option<String>,
    /// `node`.
    pub node: Option<String>,
    /// `launched_at`.
    pub launched_at: Option<DateTime<Utc>>,
    /// `deleted`.
    pub deleted: bool,
    /// `vcpus`.
    pub vcpus: Option<i64>,
    /// `memory_mb`.
    pub memory_mb: Option<i64>,
    /// `root_gb`.
    pub root_gb: Option<i64>,
    /// `ephemeral_gb`.
    pub ephemeral_gb: Option<i64>,
}

impl InstanceRow {
    /// The wire form.
    pub fn to_record(&self) -> rpc::InstanceRecord {
        rpc::InstanceRecord {
            instance_uuid: self.uuid.clone(),
            vm_state: self.vm_state.clone().unwrap_or_default(),
            task_state: self.task_state.clone(),
            power_state: self.power_state.unwrap_or(0) as i32,
            host: self.host.clone(),
            node: self.node.clone(),
            deleted: self.deleted,
        }
    }
}

pub(crate) const COLUMNS: &str =
    "uuid, project_id, user_id, vm_state, task_state, power_state, host, node, \
    launched_at, deleted, vcpus, memory_mb, root_gb, ephemeral_gb";

/// The columns an [`InstanceChange`] sets (binds `$1`–`$17` and `$20`;
/// [`bind_change!`] binds `$1`–`$16`, each value after its "is set" flag).
const SET_CHANGE: &str = "vm_state = CASE WHEN $1 THEN $2 ELSE vm_state END, \
    task_state = CASE WHEN $3 THEN $4 ELSE task_state END, \
    power_state = CASE WHEN $5 THEN $6 ELSE power_state END, \
    host = CASE WHEN $7 THEN $8 ELSE host END, \
    node = CASE WHEN $9 THEN $10 ELSE node END, \
    launched_at = CASE WHEN $11 THEN $12 ELSE launched_at END, \
    launched_on = CASE WHEN $13 THEN $14 ELSE launched_on END, \
    progress = CASE WHEN $15 THEN $16 ELSE progress END, \
    updated_at = $17, last_update_id = $20";

/// Binds `$1`–`$16` of [`SET_CHANGE`] from `$c` (an `&InstanceChange`).
macro_rules! bind_change {
    ($q:expr, $c:expr) => {{
        let c: &InstanceChange = $c;
        $q.bind(c.vm_state.is_some())
            .bind(&c.vm_state)
            .bind(c.task_state.is_some())
            .bind(c.task_state.clone().flatten())
            .bind(c.power_state.is_some())
            .bind(c.power_state)
            .bind(c.host.is_some())
            .bind(c.host.clone().flatten())
            .bind(c.node.is_some())
            .bind(c.node.clone().flatten())
            .bind(c.launched_at.is_some())
            .bind(c.launched_at)
            .bind(c.launched_on.is_some())
            .bind(&c.launched_on)
            .bind(c.progress.is_some())
            .bind(c.progress)
    }};
}

/// A new instance row (what the API layer writes before casting the build).
#[derive(Debug, Clone, PartialEq)]
pub struct NewInstance {
    /// The instance.
    pub uuid: InstanceUuid,
    /// Project.
    pub project_id: String,
    /// User.
    pub user_id: String,
    /// Display name.
    pub display_name: Option<String>,
    /// Flavor resources.
    pub flavor: FlavorResources,
    /// Image.
    pub image_ref: String,
    /// Host chosen by the scheduler (may be unset).
    pub host: Option<String>,
    /// Node chosen by the scheduler.
    pub node: Option<String>,
    /// Request ids of the `create` action, written with the row when given.
    pub request_id: Option<(String, String)>,
}

/// An instance row with the idempotency key of its last applied update.
#[derive(Debug, sqlx::FromRow)]
struct WithUpdateId {
    #[sqlx(flatten)]
    row: InstanceRow,
    last_update_id: Option<String>,
}

impl CellDb {
    /// Creates an instance in `building` / `scheduling` (and its `create`
    /// action when a request id is given).
    pub async fn create_instance(&self, n: &NewInstance) -> Result<InstanceRow> {
        let sql = format!(
            "INSERT INTO instances (uuid, project_id, user_id, display_name, vm_state, task_state, \
             power_state, vcpus, memory_mb, root_gb, ephemeral_gb, image_ref, host, node, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING {COLUMNS}"
        );
        let uuid = n.uuid.to_string();
        let t = now();
        Ok(on_db!(self, p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let row: InstanceRow = measured("instance_insert", sqlx::query_as(&sql)
                .bind(&uuid).bind(&n.project_id).bind(&n.user_id).bind(&n.display_name)
                .bind(vs::BUILDING).bind(ts::SCHEDULING).bind(rpc::power_state::NOSTATE as i64)
                .bind(n.flavor.vcpus).bind(n.flavor.memory_mb).bind(n.flavor.root_gb)
                .bind(n.flavor.ephemeral_gb).bind(&n.image_ref).bind(&n.host).bind(&n.node).bind(t)
                .fetch_one(&mut *tx)).await.map_err(db("instance_insert"))?;
            if let Some((rid, grid)) = &n.request_id {
                measured("action_create", sqlx::query(
                    "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                     user_id, project_id, start_time, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)")
                    .bind(&uuid).bind(rpc::action::CREATE).bind(rid).bind(grid)
                    .bind(&n.user_id).bind(&n.project_id).bind(t)
                    .execute(&mut *tx)).await.map_err(db("action_create"))?;
            }
            tx.commit().await.map_err(db("commit"))?;
            row
        }))
    }

    /// The instance, deleted or not.
    pub async fn instance(&self, uuid: InstanceUuid) -> Result<Option<InstanceRow>> {
        let sql = format!("SELECT {COLUMNS} FROM instances WHERE uuid = $1");
        Ok(on_db!(self, p => measured("instance_get",
            sqlx::query_as(&sql).bind(uuid.to_string()).fetch_optional(p)).await
            .map_err(db("instance_get"))?))
    }

    /// An instance with the idempotency key of its last applied update
    /// (`None` when there is no such instance).
    pub async fn instance_with_update_id(
        &self,
        uuid: InstanceUuid,
    ) -> Result<Option<(InstanceRow, Option<String>)>> {
        let sql = format!("SELECT {COLUMNS}, last_update_id FROM instances WHERE uuid = $1");
        let got: Option<WithUpdateId> = on_db!(self, p => measured("instance_get",
            sqlx::query_as(&sql).bind(uuid.to_string()).fetch_optional(p)).await
            .map_err(db("instance_get"))?);
        Ok(got.map(|w| (w.row, w.last_update_id)))
    }

    /// The live instances on `host`, and every instance among `uuids`
    /// (deleted, or on another host, included), each once, ordered by
    /// uuid. The uuids are looked up 500 at a time.
    pub async fn instances_for_host(
        &self,
        host: &str,
        uuids: &[InstanceUuid],
    ) -> Result<Vec<InstanceRow>> {
        let on_host =
            format!("SELECT {COLUMNS} FROM instances WHERE host = $1 AND deleted IS FALSE");
        let mut rows: Vec<InstanceRow> = on_db!(self, p => measured("instance_list_by_host",
            sqlx::query_as(&on_host).bind(host).fetch_all(p)).await
            .map_err(db("instance_list_by_host"))?);
        let mut keys: Vec<String> = uuids.iter().map(ToString::to_string).collect();
        keys.sort();
        keys.dedup();
        for chunk in keys.chunks(500) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT {COLUMNS} FROM instances WHERE uuid IN ({})",
                marks.join(", ")
            );
            let found: Vec<InstanceRow> = on_db!(self, p => {
                let mut q = sqlx::query_as(&sql);
                for k in chunk {
                    q = q.bind(k);
                }
                measured("instance_list_by_uuid", q.fetch_all(p)).await
                    .map_err(db("instance_list_by_uuid"))?
            });
            rows.extend(found);
        }
        rows.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        rows.dedup_by(|a, b| a.uuid == b.uuid);
        Ok(rows)
    }

    /// Applies `change` to a live instance, checking the expected task
    /// states and the task-state machine; records its events in the same
    /// transaction.
    pub async fn update_instance(
        &self,
        uuid: InstanceUuid,
        change: &InstanceChange,
    ) -> Result<InstanceRow> {
        Ok(self.apply_update(uuid, change, false).await?.row)
    }

    /// [`Self::update_instance`], saying which way it was written and,
    /// when `node_failures` is asked on the single-statement way, the
    /// failed-build count of the instance's compute node read in the same
    /// statement (so a successful build needs no second read to know there
    /// is nothing to reset).
    ///
    /// On PostgreSQL an update that names the task states it expects, whose
    /// every expected state may go to the new one, and whose events belong
    /// to one action without an error among them (every step of a build)
    /// is one statement: the compare-and-set on the task state (and host,
    /// and "not this `update_id` again"), the action's find-or-create, the
    /// events' finish-or-insert. When that statement matches no live row
    /// nothing was written, and the transaction way below runs, which gives
    /// the precise refusal or recognises the repeat.
    pub async fn apply_update(
        &self,
        uuid: InstanceUuid,
        change: &InstanceChange,
        node_failures: bool,
    ) -> Result<Updated> {
        if let (CellDb::Pg(p), Some(plan)) = (self, SinglePlan::of(change)) {
            if let Some(u) = single_statement_update(p, uuid, change, &plan, node_failures).await? {
                crate::metrics::instance_update_path(UpdatePath::SingleStatement);
                return Ok(u);
            }
        }
        let row = self.update_in_transaction(uuid, change).await?;
        crate::metrics::instance_update_path(UpdatePath::Transaction);
        Ok(Updated {
            row,
            path: UpdatePath::Transaction,
            node_failed_builds: None,
        })
    }

    async fn update_in_transaction(
        &self,
        uuid: InstanceUuid,
        change: &InstanceChange,
    ) -> Result<InstanceRow> {
        let select = format!("SELECT {COLUMNS}, last_update_id FROM instances WHERE uuid = $1");
        let update = format!(
            "UPDATE instances SET {SET_CHANGE} \
             WHERE uuid = $18 AND deleted IS FALSE AND COALESCE(task_state, '') = $19 \
             AND ($20 IS NULL OR last_update_id IS NULL OR last_update_id <> $20) \
             RETURNING {COLUMNS}"
        );
        let key = uuid.to_string();
        let c = change;
        // Compare-and-set on the task state read and on the update not being
        // the last applied one; a concurrent change makes the UPDATE match
        // nothing and the whole check runs again. Two copies of one update
        // (a caller repeating a call whose reply did not come in time) may
        // both read the row before either writes: on PostgreSQL the second
        // copy's UPDATE waits on the first one's row lock, is evaluated
        // again on the committed row, where `last_update_id` is its own key,
        // matches nothing (even when the update leaves the task state as it
        // was), and the next read answers it as a repeat. On SQLite write
        // transactions run one at a time, so the second read sees the key.
        for _ in 0..5 {
            let done: Option<InstanceRow> = on_db!(self, p => {
                let mut tx = p.begin_write().await.map_err(db("begin"))?;
                let cur: Option<WithUpdateId> = measured("instance_get",
                    sqlx::query_as(&select).bind(&key).fetch_optional(&mut *tx)).await
                    .map_err(db("instance_get"))?;
                let (cur, last) = match cur {
                    Some(r) if !r.row.deleted => (r.row, r.last_update_id),
                    _ => return Err(ConductorError::InstanceNotFound(key)),
                };
                let repeat = c.update_id.is_some() && last == c.update_id;
                if repeat {
                    // Applied already (its reply was lost): answer the row
                    // as it is now, apply nothing, record no event again.
                    tracing::info!(instance = %key, update_id = ?c.update_id,
                        "repeated instance update recognised; already applied");
                    crate::metrics::repeated_update();
                    tx.rollback().await.map_err(db("rollback"))?;
                    return Ok(cur);
                }
                check(&key, &cur, c)?;
                let seen = cur.task_state.clone().unwrap_or_default();
                let row: Option<InstanceRow> = measured("instance_update",
                    bind_change!(sqlx::query_as(&update), c)
                    .bind(now()).bind(&key).bind(&seen).bind(&c.update_id)
                    .fetch_optional(&mut *tx)).await.map_err(db("instance_update"))?;
                match row {
                    Some(row) => {
                        for ev in &c.events {
                            record_event!(tx, ev);
                        }
                        tx.commit().await.map_err(db("commit"))?;
                        Some(row)
                    }
                    None => None,
                }
            });
            if let Some(row) = done {
                return Ok(row);
            }
        }
        Err(ConductorError::InvalidTransition {
            instance: key,
            from: None,
            to: change.task_state.clone().flatten(),
        })
    }

    /// Sets a live instance to ERROR (task state NULL) with `fault`, and
    /// records `events`, in one transaction.
    pub async fn set_error(
        &self,
        uuid: InstanceUuid,
        fault: &Fault,
        events: &[Event],
    ) -> Result<InstanceRow> {
        let sql = format!(
            "UPDATE instances SET vm_state = $1, task_state = NULL, updated_at = $2 \
             WHERE uuid = $3 AND deleted IS FALSE RETURNING {COLUMNS}"
        );
        let key = uuid.to_string();
        Ok(on_db!(self, p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let row: Option<InstanceRow> = measured("instance_set_error", sqlx::query_as(&sql)
                .bind(vs::ERROR).bind(now()).bind(&key)
                .fetch_optional(&mut *tx)).await.map_err(db("instance_set_error"))?;
            let Some(row) = row else {
                return Err(ConductorError::InstanceNotFound(key));
            };
            insert_fault!(tx, &key, fault);
            for ev in events {
                record_event!(tx, ev);
            }
            tx.commit().await.map_err(db("commit"))?;
            row
        }))
    }

    /// Marks an instance (and its block device mappings) deleted and
    /// records `events`. Idempotent: an already deleted instance is
    /// answered as it is.
    pub async fn mark_deleted(&self, uuid: InstanceUuid, events: &[Event]) -> Result<InstanceRow> {
        let sql = format!(
            "UPDATE instances SET deleted = TRUE, deleted_at = $1, terminated_at = $1, updated_at = $1, \
             vm_state = $2, task_state = NULL, power_state = $3 \
             WHERE uuid = $4 AND deleted IS FALSE RETURNING {COLUMNS}"
        );
        let key = uuid.to_string();
        let t = now();
        let row: Option<InstanceRow> = on_db!(self, p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let row: Option<InstanceRow> = measured("instance_delete", sqlx::query_as(&sql)
                .bind(t).bind(vs::DELETED).bind(rpc::power_state::NOSTATE as i64).bind(&key)
                .fetch_optional(&mut *tx)).await.map_err(db("instance_delete"))?;
            if row.is_some() {
                measured("bdm_delete", sqlx::query(
                    "UPDATE block_device_mapping SET deleted = TRUE, deleted_at = $1, updated_at = $1 \
                     WHERE instance_uuid = $2 AND NOT deleted")
                    .bind(t).bind(&key).execute(&mut *tx)).await.map_err(db("bdm_delete"))?;
                for ev in events {
                    record_event!(tx, ev);
                }
            }
            tx.commit().await.map_err(db("commit"))?;
            row
        });
        match row {
            Some(r) => Ok(r),
            None => self
                .instance(uuid)
                .await?
                .ok_or(ConductorError::InstanceNotFound(key)),
        }
    }
}

/// The expected-state and state-machine checks of an update.
/// How an instance update was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdatePath {
    /// One PostgreSQL statement (see [`CellDb::apply_update`]).
    SingleStatement,
    /// Read, check, write and events in one transaction.
    Transaction,
}

impl UpdatePath {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            UpdatePath::SingleStatement => "single_statement",
            UpdatePath::Transaction => "transaction",
        }
    }
}

/// An applied instance update.
#[derive(Debug, Clone, PartialEq)]
pub struct Updated {
    /// The row after the update.
    pub row: InstanceRow,
    /// Which way it was written.
    pub path: UpdatePath,
    /// The failed-build count of the instance's compute node, read in the
    /// update's statement when asked (`None`: not read).
    pub node_failed_builds: Option<i64>,
}

/// What the single statement needs beyond the change itself.
#[derive(Debug)]
struct SinglePlan<'a> {
    /// The expected task states the new one may follow (`''` for NULL).
    from: Vec<String>,
    /// The events' common action, when there are events.
    action: Option<&'a Event>,
    /// The events to write, in order: an event started and finished in this
    /// same change (steps folded into one, see
    /// [`fold_steps`](crate::model::fold_steps)) is one entry, its finish
    /// with the start's time.
    events: Vec<(&'a Event, Option<DateTime<Utc>>)>,
}

impl<'a> SinglePlan<'a> {
    /// `None` when the change needs the transaction way: no expected task
    /// states, none of them allowed to go to the new state, events of
    /// several actions, an event named twice (other than a start and then
    /// its finish), or a failed event (which marks its action failed).
    fn of(c: &'a InstanceChange) -> Option<Self> {
        let from: Vec<String> = c
            .expected
            .iter()
            .filter(|e| c.allowed_from(e.as_deref()))
            .map(|e| e.clone().unwrap_or_default())
            .collect();
        if from.is_empty() {
            return None;
        }
        let first = c.events.first();
        let mut events: Vec<(&Event, Option<DateTime<Utc>>)> = Vec::with_capacity(c.events.len());
        if let Some(f) = first {
            for ev in &c.events {
                if ev.action != f.action
                    || ev.request_id != f.request_id
                    || ev.global_request_id != f.global_request_id
                    || ev.result.as_deref() == Some(rpc::action::ERROR)
                {
                    return None;
                }
                match events.iter_mut().find(|(o, _)| o.event == ev.event) {
                    None => events.push((ev, None)),
                    // Started earlier in this change, finished now.
                    Some(open @ (_, None))
                        if open.0.phase == Phase::Start && ev.phase == Phase::Finish =>
                    {
                        *open = (ev, Some(open.0.at));
                    }
                    Some(_) => return None,
                }
            }
        }
        Some(Self {
            from,
            action: first,
            events,
        })
    }
}

/// The row a single-statement update answers.
#[derive(Debug, sqlx::FromRow)]
struct WithNodeStats {
    #[sqlx(flatten)]
    row: InstanceRow,
    node_stats: Option<String>,
}

/// The single-statement update (see [`CellDb::apply_update`]): `None` when
/// it matched no row and wrote nothing.
async fn single_statement_update(
    p: &migrations::PgStash,
    uuid: InstanceUuid,
    c: &InstanceChange,
    plan: &SinglePlan<'_>,
    node_failures: bool,
) -> Result<Option<Updated>> {
    // Data-modifying CTEs see one snapshot: `fin` finishes the events open
    // before the statement, `ins` inserts the starts and the finishes that
    // found nothing open (event names are distinct, so no event is both).
    let sql = format!(
        "WITH upd AS (UPDATE instances SET {SET_CHANGE} \
         WHERE uuid = $18 AND deleted IS FALSE AND COALESCE(task_state, '') = ANY($19) \
         AND ($21::VARCHAR IS NULL OR host = $21) \
         AND ($20::VARCHAR IS NULL OR last_update_id IS DISTINCT FROM $20) \
         RETURNING {COLUMNS}), \
         act AS (INSERT INTO instance_actions (instance_uuid, action, request_id, \
         global_request_id, start_time, created_at, updated_at) \
         SELECT uuid, $22, $23, $24, $25, $25, $26 FROM upd WHERE $27 \
         ON CONFLICT (instance_uuid, request_id) DO UPDATE SET updated_at = excluded.updated_at \
         RETURNING id), \
         ev AS (SELECT * FROM unnest($28::VARCHAR[], $29::BOOLEAN[], $30::TIMESTAMPTZ[], \
         $31::VARCHAR[], $32::VARCHAR[], $33::TEXT[], $34::TEXT[], $36::TIMESTAMPTZ[]) WITH ORDINALITY \
         AS e(event, finish, at, host, result, traceback, details, started, ord)), \
         fin AS (UPDATE instance_actions_events x SET finish_time = ev.at, result = ev.result, \
         traceback = ev.traceback, details = ev.details, updated_at = ev.at \
         FROM act, ev WHERE ev.finish AND ev.started IS NULL AND x.action_id = act.id \
         AND x.event = ev.event AND x.finish_time IS NULL RETURNING x.event), \
         ins AS (INSERT INTO instance_actions_events (action_id, event, host, result, traceback, \
         request_id, global_request_id, start_time, finish_time, created_at, details) \
         SELECT act.id, ev.event, ev.host, ev.result, ev.traceback, $23, $24, COALESCE(ev.started, ev.at), \
         CASE WHEN ev.finish THEN ev.at END, COALESCE(ev.started, ev.at), ev.details FROM act, ev \
         WHERE NOT ev.finish OR ev.started IS NOT NULL \
         OR NOT EXISTS (SELECT 1 FROM fin WHERE fin.event = ev.event) \
         ORDER BY ev.ord) \
         SELECT upd.*, (SELECT n.stats FROM compute_nodes n WHERE $35 AND n.host = upd.host \
         AND n.hypervisor_hostname = upd.node AND NOT n.deleted) AS node_stats FROM upd"
    );
    let evs = &plan.events;
    let col =
        |f: &dyn Fn(&Event) -> Option<String>| evs.iter().map(|(e, _)| f(e)).collect::<Vec<_>>();
    let (action, request_id, global_request_id) = match plan.action {
        Some(a) => (
            a.action.as_str(),
            a.request_id.as_str(),
            a.global_request_id.clone(),
        ),
        None => ("", "", None),
    };
    let first_at = c.events.first().map(|e| e.at);
    let last_at = c.events.last().map(|e| e.at);
    let mut conn = p.conn().await.map_err(db("instance_update_single"))?;
    let got: Option<WithNodeStats> = measured(
        "instance_update_single",
        bind_change!(sqlx::query_as(&sql), c)
            .bind(now())
            .bind(uuid.to_string())
            .bind(&plan.from)
            .bind(&c.update_id)
            .bind(&c.expected_host)
            .bind(action)
            .bind(request_id)
            .bind(global_request_id)
            .bind(first_at)
            .bind(last_at)
            .bind(!evs.is_empty())
            .bind(evs.iter().map(|(e, _)| e.event.clone()).collect::<Vec<_>>())
            .bind(
                evs.iter()
                    .map(|(e, _)| e.phase == Phase::Finish)
                    .collect::<Vec<_>>(),
            )
            .bind(evs.iter().map(|(e, _)| e.at).collect::<Vec<_>>())
            .bind(col(&|e| e.host.clone()))
            .bind(col(&|e| e.result.clone()))
            .bind(col(&|e| e.traceback.clone()))
            .bind(col(&|e| e.details.clone()))
            .bind(node_failures)
            .bind(evs.iter().map(|(_, started)| *started).collect::<Vec<_>>())
            .fetch_optional(conn.get()),
    )
    .await
    .map_err(db("instance_update_single"))?;
    conn.keep();
    Ok(got.map(|g| Updated {
        node_failed_builds: node_failures
            .then(|| super::compute_nodes::failed_builds(g.node_stats.as_deref())),
        row: g.row,
        path: UpdatePath::SingleStatement,
    }))
}

fn check(key: &str, cur: &InstanceRow, c: &InstanceChange) -> Result<()> {
    let from = cur.task_state.as_deref();
    if !c.expected.is_empty() && !c.expected.iter().any(|e| e.as_deref() == from) {
        return Err(ConductorError::UnexpectedTaskState {
            instance: key.to_owned(),
            expected: c
                .expected
                .iter()
                .map(|e| e.clone().unwrap_or_else(|| "NULL".into()))
                .collect(),
            actual: cur.task_state.clone(),
        });
    }
    if let Some(want) = &c.expected_host {
        if cur.host.as_deref() != Some(want.as_str()) {
            return Err(ConductorError::UnexpectedHost {
                instance: key.to_owned(),
                expected: want.clone(),
                actual: cur.host.clone(),
            });
        }
    }
    if let Some(to) = c.transition_to() {
        if !c.allowed_from(from) {
            if from == Some(ts::DELETING) {
                return Err(ConductorError::UnexpectedTaskState {
                    instance: key.to_owned(),
                    expected: vec![],
                    actual: cur.task_state.clone(),
                });
            }
            return Err(ConductorError::InvalidTransition {
                instance: key.to_owned(),
                from: cur.task_state.clone(),
                to: to.clone(),
            });
        }
    }
    Ok(())
}
