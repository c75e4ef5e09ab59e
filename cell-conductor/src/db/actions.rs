//! `instance_actions`, `instance_actions_events` and `instance_faults`.

use chrono::{DateTime, Utc};
use fabric::ids::InstanceUuid;
use migrations::BeginWrite;

use super::{on_db, CellDb};
use crate::error::{db, Result};
use crate::metrics::measured;
use crate::model::{Event, Fault};

/// Records `$ev` (a `&Event`) inside transaction `$tx`: finds or creates
/// the action of `(instance, request_id)` (bumping its `updated_at`), then
/// starts the event, or
/// finishes the open event of that name (inserting it whole if it was never
/// started). A failed event marks its action `Error`, as upstream.
macro_rules! record_event {
    ($tx:expr, $ev:expr) => {{
        let ev: &$crate::model::Event = $ev;
        let uuid = ev.instance.to_string();
        // Finds or creates the action and bumps its `updated_at` (every
        // event does, as upstream: the compute API's `changes-since` on
        // instance actions reads it), in one statement.
        let action_id: i64 = $crate::metrics::measured(
            "action_upsert",
            sqlx::query_scalar(
                "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                 start_time, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5, $5) \
                 ON CONFLICT (instance_uuid, request_id) DO UPDATE SET updated_at = excluded.updated_at \
                 RETURNING id",
            )
            .bind(&uuid)
            .bind(&ev.action)
            .bind(&ev.request_id)
            .bind(&ev.global_request_id)
            .bind(ev.at)
            .fetch_one(&mut *$tx),
        )
        .await
        .map_err($crate::error::db("action_upsert"))?;
        let finished = match ev.phase {
            $crate::model::Phase::Start => 0,
            $crate::model::Phase::Finish => {
                $crate::metrics::measured(
                    "event_finish",
                    sqlx::query(
                        "UPDATE instance_actions_events SET finish_time = $1, result = $2, \
                         traceback = $3, details = $6, updated_at = $1 \
                         WHERE action_id = $4 AND event = $5 AND finish_time IS NULL",
                    )
                    .bind(ev.at)
                    .bind(&ev.result)
                    .bind(&ev.traceback)
                    .bind(action_id)
                    .bind(&ev.event)
                    .bind(&ev.details)
                    .execute(&mut *$tx),
                )
                .await
                .map_err($crate::error::db("event_finish"))?
                .rows_affected()
            }
        };
        if finished == 0 {
            let finish = (ev.phase == $crate::model::Phase::Finish).then_some(ev.at);
            $crate::metrics::measured(
                "event_insert",
                sqlx::query(
                    "INSERT INTO instance_actions_events (action_id, event, host, result, traceback, \
                     request_id, global_request_id, start_time, finish_time, created_at, details) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $8, $10)",
                )
                .bind(action_id)
                .bind(&ev.event)
                .bind(&ev.host)
                .bind(&ev.result)
                .bind(&ev.traceback)
                .bind(&ev.request_id)
                .bind(&ev.global_request_id)
                .bind(ev.at)
                .bind(finish)
                .bind(&ev.details)
                .execute(&mut *$tx),
            )
            .await
            .map_err($crate::error::db("event_insert"))?;
        }
        if ev.result.as_deref() == Some(fabric::rpc::action::ERROR) {
            $crate::metrics::measured(
                "action_error",
                sqlx::query("UPDATE instance_actions SET message = $1, updated_at = $2 WHERE id = $3")
                    .bind(fabric::rpc::action::ERROR)
                    .bind(ev.at)
                    .bind(action_id)
                    .execute(&mut *$tx),
            )
            .await
            .map_err($crate::error::db("action_error"))?;
        }
    }};
}
pub(crate) use record_event;

/// Inserts `$fault` (a `&Fault`) for `$uuid` (a `&str`) inside `$tx`.
macro_rules! insert_fault {
    ($tx:expr, $uuid:expr, $fault:expr) => {{
        let f: &$crate::model::Fault = $fault;
        $crate::metrics::measured(
            "fault_insert",
            sqlx::query(
                "INSERT INTO instance_faults (instance_uuid, code, message, details, host, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind($uuid)
            .bind(f.code)
            .bind(&f.message)
            .bind(&f.details)
            .bind(&f.host)
            .bind($crate::db::now())
            .execute(&mut *$tx),
        )
        .await
        .map_err($crate::error::db("fault_insert"))?;
    }};
}
pub(crate) use insert_fault;

/// One event with its action, as read back.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct EventRow {
    /// The action (`create`, `delete`).
    pub action: String,
    /// The action's request id.
    pub action_request_id: String,
    /// The event.
    pub event: String,
    /// Host.
    pub host: Option<String>,
    /// Result.
    pub result: Option<String>,
    /// Traceback.
    pub traceback: Option<String>,
    /// The event's request id.
    pub request_id: Option<String>,
    /// Start.
    pub start_time: Option<DateTime<Utc>>,
    /// Finish.
    pub finish_time: Option<DateTime<Utc>>,
}

/// A fault, as read back.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct FaultRow {
    /// Code.
    pub code: i64,
    /// Message.
    pub message: Option<String>,
    /// Details.
    pub details: Option<String>,
    /// Host.
    pub host: Option<String>,
}

impl CellDb {
    /// Records one action event (its own transaction).
    pub async fn record_event(&self, ev: &Event) -> Result<()> {
        on_db!(self, p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            record_event!(tx, ev);
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(())
    }

    /// Records one fault.
    pub async fn record_fault(&self, instance: InstanceUuid, fault: &Fault) -> Result<()> {
        let uuid = instance.to_string();
        on_db!(self, p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            insert_fault!(tx, &uuid, fault);
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(())
    }

    /// The events of an instance's actions, oldest first.
    pub async fn events(&self, instance: InstanceUuid) -> Result<Vec<EventRow>> {
        let sql = "SELECT a.action, a.request_id AS action_request_id, e.event, e.host, e.result, \
                   e.traceback, e.request_id, e.start_time, e.finish_time \
                   FROM instance_actions_events e JOIN instance_actions a ON a.id = e.action_id \
                   WHERE a.instance_uuid = $1 ORDER BY e.id";
        Ok(on_db!(self, p => measured("event_list",
            sqlx::query_as(sql).bind(instance.to_string()).fetch_all(p)).await
            .map_err(db("event_list"))?))
    }

    /// The request id of the newest action `action` of `instance` whose
    /// event `event` was started and never finished (`None`: there is
    /// none), e.g. the delete an agent was carrying out when it stopped.
    pub async fn open_event_request_id(
        &self,
        instance: InstanceUuid,
        action: &str,
        event: &str,
    ) -> Result<Option<String>> {
        let sql = "SELECT a.request_id FROM instance_actions a \
                   JOIN instance_actions_events e ON e.action_id = a.id \
                   WHERE a.instance_uuid = $1 AND a.action = $2 AND e.event = $3 \
                   AND e.finish_time IS NULL ORDER BY e.id DESC LIMIT 1";
        Ok(
            on_db!(self, p => measured("open_event", sqlx::query_scalar(sql)
            .bind(instance.to_string()).bind(action).bind(event).fetch_optional(p)).await
            .map_err(db("open_event"))?),
        )
    }

    /// The request id of the newest action `action` of `instance` not
    /// finished (`None`: there is none), e.g. a delete whose terminate
    /// cast was lost before its host started it.
    pub async fn open_action_request_id(
        &self,
        instance: InstanceUuid,
        action: &str,
    ) -> Result<Option<String>> {
        let sql = "SELECT request_id FROM instance_actions WHERE instance_uuid = $1 \
                   AND action = $2 AND finish_time IS NULL ORDER BY id DESC LIMIT 1";
        Ok(
            on_db!(self, p => measured("open_action", sqlx::query_scalar(sql)
            .bind(instance.to_string()).bind(action).fetch_optional(p)).await
            .map_err(db("open_action"))?),
        )
    }

    /// The faults of an instance, oldest first.
    pub async fn faults(&self, instance: InstanceUuid) -> Result<Vec<FaultRow>> {
        let sql = "SELECT code, message, details, host FROM instance_faults \
                   WHERE instance_uuid = $1 ORDER BY id";
        Ok(on_db!(self, p => measured("fault_list",
            sqlx::query_as(sql).bind(instance.to_string()).fetch_all(p)).await
            .map_err(db("fault_list"))?))
    }
}
