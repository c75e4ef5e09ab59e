//! `/servers/{id}/os-instance-actions[/{request_id}]`: the actions recorded
//! in the server's cell database (create, delete, stop, reboot, lock, …)
//! with their events.
//!
//! Microversions: 2.21 (actions of deleted servers), 2.51 (events for every
//! caller; the traceback only with `os-instance-actions:events`), 2.58
//! (`limit`, `marker`, `changes-since`, `updated_at`), 2.62 (event `hostId`,
//! and `host` with the events rule), 2.66 (`changes-before`), 2.84 (event
//! `details` with `os-instance-actions:events:details`).

use axum::extract::{Path, RawQuery, State};
use axum::{Extension, Json};
use cell_mapping::db::server_actions::{ActionsFilter, InstanceActionRow};
use cell_mapping::db::CellInstance;
use cell_mapping::CellDb;
use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::servers::lookup::check_owner;
use super::servers::parse_query;
use super::servers::views::host_id;
use super::{App, Ctx};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// Nova's timestamp format of instance actions (UTC, microseconds).
fn ts(t: Option<DateTime<Utc>>) -> Value {
    match t {
        Some(t) => json!(t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()),
        None => Value::Null,
    }
}

/// The server's cell database and row (deleted ones from 2.21), after the
/// policy check (another project's server is 404). `None`: a build not
/// scheduled yet (it has no actions in a cell).
async fn locate(
    app: &App,
    ctx: &Ctx,
    id: &str,
    rule: &str,
) -> ApiResult<Option<(CellDb, CellInstance)>> {
    let Some((cell_id, project, user)) = app.db.mapping(id).await? else {
        return Err(ApiError::server_not_found(id));
    };
    check_owner(app, ctx, rule, (&project, user.as_deref()), id)?;
    let Some(cid) = cell_id else {
        return Ok(None);
    };
    let cell = app
        .cells
        .by_id(cid)
        .ok_or_else(|| ApiError::Internal(format!("cell {cid} is not in the cache")))?;
    let db = app.cells.db(&cell).await?;
    let Some(i) = db.api_instance(id).await? else {
        return Err(ApiError::server_not_found(id));
    };
    if i.deleted && !ctx.mv.at_least(21) {
        return Err(ApiError::server_not_found(id));
    }
    Ok(Some((db, i)))
}

fn action_view(ctx: &Ctx, a: &InstanceActionRow) -> Value {
    let mut v = json!({
        "action": a.action,
        "instance_uuid": a.instance_uuid,
        "message": a.message,
        "project_id": a.project_id,
        "request_id": a.request_id,
        "start_time": ts(a.start_time),
        "user_id": a.user_id,
    });
    if ctx.mv.at_least(58) {
        v["updated_at"] = ts(a.updated_at.or(Some(a.created_at)));
    }
    v
}

pub(crate) fn parse_time(name: &str, s: &str) -> ApiResult<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M:%S%.f",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Ok(t.and_utc());
        }
    }
    Err(bad(format!(
        "Invalid input for query parameters {name}. Value: {s}. '{s}' is not a 'date-time'"
    )))
}

/// `GET /servers/{id}/os-instance-actions`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::INSTANCE_ACTION_LIST.check(ctx.mv, raw.as_deref())?;
    let mut f = ActionsFilter::default();
    let q = parse_query(raw.as_deref());
    let mut marker = None;
    if ctx.mv.at_least(58) {
        if let Some(l) = q.get("limit") {
            let n: i64 = l.parse().ok().filter(|n| *n >= 0).ok_or_else(|| {
                bad(format!(
                    "Invalid input for query parameters limit. Value: {l}. '{l}' does not match '^[0-9]*$'"
                ))
            })?;
            f.limit = Some(n.min(app.max_limit as i64));
        }
        if f.limit.is_none() {
            f.limit = Some(app.max_limit as i64);
        }
        if let Some(s) = q.get("changes-since") {
            f.changes_since = Some(parse_time("changes-since", s)?);
        }
        if let Some(s) = q.get("changes-before") {
            f.changes_before = Some(parse_time("changes-before", s)?);
        }
        if let (Some(a), Some(b)) = (f.changes_since, f.changes_before) {
            if a > b {
                return Err(bad(
                    "The value of changes-since must be less than or equal to changes-before.",
                ));
            }
        }
        marker = q.get("marker").cloned();
    }
    let Some((db, _)) = locate(&app, &ctx, &id, "os_compute_api:os-instance-actions:list").await?
    else {
        return Ok(Json(json!({"instanceActions": []})));
    };
    if let Some(m) = &marker {
        let Some(a) = db.api_instance_action(&id, m).await? else {
            return Err(bad(format!("Marker {m} could not be found.")));
        };
        f.after = Some((a.created_at, a.id));
    }
    let rows = db.api_instance_actions(&id, &f).await?;
    let items: Vec<Value> = rows.iter().map(|a| action_view(&ctx, a)).collect();
    let mut body = json!({ "instanceActions": items });
    if let (Some(limit), Some(last)) = (f.limit, rows.last()) {
        if limit > 0 && rows.len() as i64 >= limit && ctx.mv.at_least(58) {
            let mut params: Vec<String> = raw
                .as_deref()
                .unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty() && !p.starts_with("marker="))
                .map(str::to_owned)
                .collect();
            params.push(format!("marker={}", last.request_id));
            body["links"] = json!([{"rel": "next", "href": format!(
                "{}/v2.1/servers/{id}/os-instance-actions?{}", app.public_url(), params.join("&"))}]);
        }
    }
    Ok(Json(body))
}

/// `GET /servers/{id}/os-instance-actions/{request_id}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, request_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    let not_found = || {
        ApiError::NotFound(format!(
            "Action for request_id {request_id} on instance {id} not found"
        ))
    };
    let Some((db, instance)) =
        locate(&app, &ctx, &id, "os_compute_api:os-instance-actions:show").await?
    else {
        return Err(not_found());
    };
    let a = db
        .api_instance_action(&id, &request_id)
        .await?
        .ok_or_else(not_found)?;
    let mut v = action_view(&ctx, &a);
    let may = |rule: &str| app.authorize(&ctx, rule, &instance.project_id).is_ok();
    let events_ok = may("os_compute_api:os-instance-actions:events");
    if ctx.mv.at_least(51) || events_ok {
        let details_ok =
            ctx.mv.at_least(84) && may("os_compute_api:os-instance-actions:events:details");
        let events: Vec<Value> = db
            .api_action_events(a.id)
            .await?
            .into_iter()
            .map(|e| {
                let mut ev = json!({
                    "event": e.event,
                    "start_time": ts(e.start_time),
                    "finish_time": ts(e.finish_time),
                    "result": e.result,
                });
                if events_ok {
                    ev["traceback"] = json!(e.traceback);
                }
                if ctx.mv.at_least(62) {
                    ev["hostId"] = json!(host_id(&instance.project_id, e.host.as_deref()));
                    if events_ok {
                        ev["host"] = json!(e.host.clone().unwrap_or_default());
                    }
                }
                if details_ok {
                    ev["details"] = json!(e.details);
                }
                ev
            })
            .collect();
        v["events"] = json!(events);
    }
    Ok(Json(json!({ "instanceAction": v })))
}
