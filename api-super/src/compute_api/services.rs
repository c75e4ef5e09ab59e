//! `/os-services`: the compute services of every cell, merged (list with
//! `host`/`binary` filters), their operator switches (2.53 `PUT
//! /os-services/{uuid}`; before 2.53 `PUT /os-services/enable`, `disable`,
//! `disable-log-reason`, `force-down` (2.11)) and their delete (a compute
//! hosting instances is refused; its compute nodes, host mapping,
//! aggregate memberships and placement providers go with it). Admin only.
//!
//! Ids are a region-wide integer below 2.53 (unique across cells: see
//! [`legacy_ids`](super::legacy_ids)) and the service UUID from 2.53.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cell_mapping::db::{LegacyKind, ServiceDeleted, ServiceRecord, ServiceSwitches};
use cell_mapping::CellMapping;
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::error::{ApiError, ApiResult};
use super::legacy_ids;
use super::query_schema;
use super::servers::parse_query;
use super::{App, Ctx};
use crate::cells::CellError;
use crate::scheduler::host_state::HostZones;

/// `binary` of a compute service.
pub const COMPUTE_BINARY: &str = "nova-compute";
/// Zone of services other than computes (Nova's
/// `internal_service_availability_zone`).
pub const INTERNAL_ZONE: &str = "internal";

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// Nova's timestamp format in operator views (`2012-10-29T13:42:02.000000`).
pub(crate) fn nova_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

/// Whether a service is up: not forced down, and heard from within the
/// scheduler's service down time.
pub(crate) fn is_up(app: &App, forced_down: bool, last_seen: Option<DateTime<Utc>>) -> bool {
    let secs = app.conductor().scheduler().config().service_down_time_secs;
    let down = chrono::Duration::seconds(secs.min(i64::MAX as u64) as i64);
    !forced_down && last_seen.is_some_and(|t| Utc::now() - t <= down)
}

/// The zone of every host: its aggregates' `availability_zone`, else the
/// default zone (cached with the scheduler's host state, see
/// [`HostStateCache::zones`](crate::scheduler::host_state::HostStateCache::zones)).
pub(crate) async fn host_zones(app: &App) -> ApiResult<(Arc<HostZones>, String)> {
    let zones = app.conductor().scheduler().host_state().zones().await?;
    Ok((zones, default_zone(app)))
}

/// The zone of a host in no aggregate that names one.
pub(crate) fn default_zone(app: &App) -> String {
    app.conductor()
        .scheduler()
        .config()
        .default_availability_zone
        .clone()
}

/// Runs `f` on the database of every cell in parallel, each bounded by the
/// cell read timeout; a cell that is down or fails is left out (as Nova's
/// listings skip a down cell). The outage itself is logged once by
/// [`crate::cells`]; a failed statement is logged here.
pub(crate) async fn each_cell<T, F, Fut>(app: &App, f: F) -> ApiResult<Vec<(CellMapping, T)>>
where
    F: Fn(cell_mapping::CellDb) -> Fut,
    Fut: std::future::Future<Output = Result<T, cell_mapping::Error>>,
{
    Ok(each_cell_or_down(app, f).await.0)
}

/// As [`each_cell`], also naming the cells that did not answer.
async fn each_cell_or_down<T, F, Fut>(app: &App, f: F) -> (Vec<(CellMapping, T)>, Vec<CellMapping>)
where
    F: Fn(cell_mapping::CellDb) -> Fut,
    Fut: std::future::Future<Output = Result<T, cell_mapping::Error>>,
{
    let cells = app.cells.all();
    let runs = cells.iter().map(|cell| {
        let f = &f;
        async move { (cell.clone(), app.cells.read(cell, f).await) }
    });
    let mut out = Vec::new();
    let mut down = Vec::new();
    for (cell, res) in futures_util::future::join_all(runs).await {
        match res {
            Ok(v) => out.push((cell, v)),
            Err(CellError::Down(d)) => {
                tracing::debug!(cell = %cell.uuid, reason = %d.reason, "cell down: left out of the listing");
                down.push(cell);
            }
            Err(CellError::Query(_, e)) => {
                tracing::warn!(cell = %cell.uuid, error = %e.one_line(), "cell read failed: left out of the listing");
                down.push(cell);
            }
            Err(e) => {
                tracing::warn!(cell = %cell.uuid, error = %e, "cell read failed: left out of the listing");
                down.push(cell);
            }
        }
    }
    (out, down)
}

/// A service's view; `ids` holds the region-wide ids below 2.53 (see
/// [`legacy_ids`](super::legacy_ids)).
fn view(
    ctx: &Ctx,
    s: &ServiceRecord,
    ids: &HashMap<String, i64>,
    up: bool,
    zones: &(Arc<HostZones>, String),
) -> Value {
    let zone = if s.binary == COMPUTE_BINARY {
        zones
            .0
            .get(&s.host)
            .cloned()
            .unwrap_or_else(|| zones.1.clone())
    } else {
        INTERNAL_ZONE.to_owned()
    };
    let mut v = json!({
        "id": if ctx.mv.at_least(53) { json!(s.uuid) } else { json!(ids.get(&s.uuid)) },
        "binary": s.binary,
        "host": s.host,
        "zone": zone,
        "status": if s.disabled { "disabled" } else { "enabled" },
        "state": if up { "up" } else { "down" },
        "updated_at": s.updated_at.or(s.last_seen_up).map(nova_time),
        "disabled_reason": s.disabled_reason,
    });
    if ctx.mv.at_least(11) {
        v["forced_down"] = json!(s.forced_down);
    }
    v
}

/// `GET /os-services`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::SERVICE_LIST.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-services:list", ctx.project_id())?;
    let q = parse_query(raw.as_deref());
    let host = q.get("host").cloned();
    let binary = q.get("binary").cloned();
    let zones = host_zones(&app).await?;
    let (per_cell, down) = each_cell_or_down(&app, |db| {
        let host = host.clone();
        let binary = binary.clone();
        async move { db.services_list(host.as_deref(), binary.as_deref()).await }
    })
    .await;
    let mut all: Vec<ServiceRecord> = per_cell.into_iter().flat_map(|(_, v)| v).collect();
    all.sort_by(|a, b| (&a.host, &a.binary, &a.uuid).cmp(&(&b.host, &b.binary, &b.uuid)));
    let mut services: Vec<Value> = Vec::new();
    // From 2.69 a cell that did not answer is not silently missing: each
    // compute host mapped to it is a partial record (binary, host, status
    // UNKNOWN), as upstream builds them from the API database's host
    // mappings; its other services cannot be known and are left out.
    // Earlier microversions leave the cell out.
    if ctx.mv.at_least(69) && binary.as_deref().is_none_or(|b| b == COMPUTE_BINARY) {
        for cell in &down {
            let hosts = app.db.api().hosts(Some(cell.id)).await.map_err(|e| {
                ApiError::internal(format!(
                    "cell {} did not answer and its host mappings could not be read: {e}",
                    cell.uuid
                ))
            })?;
            services.extend(
                hosts
                    .into_iter()
                    .filter(|h| host.as_deref().is_none_or(|want| want == h.host))
                    .map(
                        |h| json!({"binary": COMPUTE_BINARY, "host": h.host, "status": "UNKNOWN"}),
                    ),
            );
        }
    }
    let ids = legacy_ids::for_uuids(
        &app,
        &ctx,
        LegacyKind::Service,
        all.iter().map(|s| s.uuid.as_str()),
    )
    .await?;
    services.extend(all.iter().map(|s| {
        view(
            &ctx,
            s,
            &ids,
            is_up(&app, s.forced_down, s.last_seen_up),
            &zones,
        )
    }));
    Ok(Json(json!({ "services": services })))
}

/// How the caller names a service.
#[derive(Clone, Copy)]
enum ServiceKey<'a> {
    Uuid(&'a str),
    Id(i64),
    HostBinary(&'a str, &'a str),
}

/// Finds the live service named by `key` in some cell. An integer id is
/// the region-wide one (see [`legacy_ids`](super::legacy_ids)), so it names
/// one service whatever the number of cells.
async fn find(app: &App, key: ServiceKey<'_>) -> ApiResult<Option<(CellMapping, ServiceRecord)>> {
    let uuid;
    let key = match key {
        ServiceKey::Id(id) => match legacy_ids::uuid_of(app, LegacyKind::Service, id).await? {
            Some(u) => {
                uuid = u;
                ServiceKey::Uuid(&uuid)
            }
            None => return Ok(None),
        },
        other => other,
    };
    let found = each_cell(app, |db| async move {
        match key {
            ServiceKey::Uuid(u) => db.service_by_uuid(u).await,
            // Turned into its UUID above.
            ServiceKey::Id(_) => Ok(None),
            ServiceKey::HostBinary(h, b) => Ok(db.services_list(Some(h), Some(b)).await?.pop()),
        }
    })
    .await?;
    Ok(found.into_iter().find_map(|(c, s)| s.map(|s| (c, s))))
}

async fn write(
    app: &App,
    cell: &CellMapping,
    s: &ServiceRecord,
    sw: &ServiceSwitches,
) -> ApiResult<ServiceRecord> {
    let db = app.cells.db(cell).await?;
    let row = db
        .service_set(s.id, sw)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("Service {} could not be found.", s.uuid)))?;
    // The scheduler must see a disabled or forced-down compute at once.
    app.conductor().scheduler().host_state().invalidate();
    Ok(row)
}

fn body_object(body: &[u8]) -> ApiResult<Map<String, Value>> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(other) => Err(bad(format!(
            "Invalid input for field/attribute body. Value: {other}. {other} is not of type 'object'"
        ))),
        Err(_) => Err(bad("Malformed request body")),
    }
}

fn reason_field(o: &Map<String, Value>) -> ApiResult<Option<String>> {
    match o.get("disabled_reason") {
        None => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= 255 => Ok(Some(s.clone())),
        Some(Value::String(s)) => Err(bad(format!(
            "Invalid input for field/attribute disabled_reason. Value: {s}. '{s}' is too long"
        ))),
        Some(v) => Err(bad(format!(
            "Invalid input for field/attribute disabled_reason. Value: {v}. {v} is not of type 'string'"
        ))),
    }
}

fn bool_field(o: &Map<String, Value>, key: &str) -> ApiResult<Option<bool>> {
    match o.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        // Nova's boolean parameter type accepts these strings too.
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" | "y" | "t" => Ok(Some(true)),
            "false" | "0" | "no" | "off" | "n" | "f" => Ok(Some(false)),
            _ => Err(bad(format!(
                "Invalid input for field/attribute {key}. Value: {s}. '{s}' is not one of the allowed values"
            ))),
        },
        Some(v) => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. {v} is not of type 'boolean'"
        ))),
    }
}

/// `PUT /os-services/{service_id}` (2.53) or `PUT /os-services/{action}`
/// (before 2.53).
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    app.authorize(&ctx, "os_compute_api:os-services:update", ctx.project_id())?;
    if ctx.mv.at_least(53) {
        update_by_uuid(&app, &ctx, &id, &body).await
    } else {
        update_action(&app, &ctx, &id, &body).await
    }
}

async fn update_by_uuid(app: &App, ctx: &Ctx, id: &str, body: &[u8]) -> ApiResult<Json<Value>> {
    if uuid::Uuid::parse_str(id).is_err() {
        return Err(bad(format!("Invalid uuid {id}")));
    }
    let o = body_object(body)?;
    if let Some(k) = o
        .keys()
        .find(|k| !matches!(k.as_str(), "status" | "disabled_reason" | "forced_down"))
    {
        return Err(bad(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let status = match o.get("status") {
        None => None,
        Some(Value::String(s)) if s == "enabled" || s == "disabled" => Some(s.as_str() == "disabled"),
        Some(v) => {
            return Err(bad(format!(
                "Invalid input for field/attribute status. Value: {v}. {v} is not one of ['enabled', 'disabled']"
            )))
        }
    };
    let reason = reason_field(&o)?;
    let forced_down = bool_field(&o, "forced_down")?;
    if status.is_none() && forced_down.is_none() {
        return Err(bad(
            "At least one of 'status' or 'forced_down' must be specified in the request body.",
        ));
    }
    if reason.is_some() && status != Some(true) {
        return Err(bad(
            "Specifying 'disabled_reason' with status 'enabled' is invalid.",
        ));
    }
    let Some((cell, s)) = find(app, ServiceKey::Uuid(id)).await? else {
        return Err(ApiError::NotFound(format!(
            "Service {id} could not be found."
        )));
    };
    if s.binary != COMPUTE_BINARY {
        return Err(bad(format!(
            "Updating a {} service is not supported. Only nova-compute services can be updated.",
            s.binary
        )));
    }
    let disabled = status.unwrap_or(s.disabled);
    let sw = ServiceSwitches {
        disabled,
        disabled_reason: match (status, reason) {
            (Some(false), _) => None,
            (Some(true), r) => r,
            (None, _) => s.disabled_reason.clone(),
        },
        forced_down: forced_down.unwrap_or(s.forced_down),
    };
    let row = write(app, &cell, &s, &sw).await?;
    let zones = host_zones(app).await?;
    let up = is_up(app, row.forced_down, row.last_seen_up);
    Ok(Json(
        json!({ "service": view(ctx, &row, &HashMap::new(), up, &zones) }),
    ))
}

async fn update_action(app: &App, ctx: &Ctx, action: &str, body: &[u8]) -> ApiResult<Json<Value>> {
    let known = matches!(action, "enable" | "disable" | "disable-log-reason")
        || (action == "force-down" && ctx.mv.at_least(11));
    if !known {
        return Err(ApiError::NotFound("Unknown action".into()));
    }
    let o = body_object(body)?;
    let field = |k: &str| -> ApiResult<String> {
        match o.get(k) {
            Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= 255 => Ok(s.clone()),
            Some(v) => Err(bad(format!(
                "Invalid input for field/attribute {k}. Value: {v}."
            ))),
            None => Err(bad(format!(
                "Invalid input for field/attribute body. '{k}' is a required property"
            ))),
        }
    };
    let host = field("host")?;
    let binary = field("binary")?;
    let reason = reason_field(&o)?;
    let forced_down = bool_field(&o, "forced_down")?;
    if action == "disable-log-reason" && reason.is_none() {
        return Err(bad("Missing disabled reason field"));
    }
    if action == "force-down" && forced_down.is_none() {
        return Err(bad(
            "Invalid input for field/attribute body. 'forced_down' is a required property",
        ));
    }
    let Some((cell, s)) = find(app, ServiceKey::HostBinary(&host, &binary)).await? else {
        return Err(ApiError::NotFound("Unknown service".into()));
    };
    if s.binary != COMPUTE_BINARY {
        return Err(bad(format!(
            "Updating a {} service is not supported. Only nova-compute services can be updated.",
            s.binary
        )));
    }
    let mut sw = ServiceSwitches {
        disabled: s.disabled,
        disabled_reason: s.disabled_reason.clone(),
        forced_down: s.forced_down,
    };
    let answer = match action {
        "enable" => {
            sw.disabled = false;
            sw.disabled_reason = None;
            json!({"host": host, "binary": binary, "status": "enabled"})
        }
        "disable" => {
            sw.disabled = true;
            json!({"host": host, "binary": binary, "status": "disabled"})
        }
        "disable-log-reason" => {
            sw.disabled = true;
            sw.disabled_reason = reason.clone();
            json!({"host": host, "binary": binary, "status": "disabled",
                   "disabled_reason": reason})
        }
        _ => {
            sw.forced_down = forced_down.unwrap_or(false);
            json!({"host": host, "binary": binary, "forced_down": sw.forced_down})
        }
    };
    write(app, &cell, &s, &sw).await?;
    Ok(Json(json!({ "service": answer })))
}

/// `DELETE /os-services/{id}`: 409 for a compute hosting instances; else
/// the service and its compute nodes (one transaction in the cell), then
/// its aggregate memberships and host mapping (API database), then its
/// placement providers (a failure there is logged: the provider is an
/// orphan an operator can delete).
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    app.authorize(&ctx, "os_compute_api:os-services:delete", ctx.project_id())?;
    let key = if ctx.mv.at_least(53) {
        if uuid::Uuid::parse_str(&id).is_err() {
            return Err(bad(format!("Invalid uuid {id}")));
        }
        ServiceKey::Uuid(&id)
    } else {
        match id.parse::<i64>() {
            Ok(n) => ServiceKey::Id(n),
            Err(_) => return Err(bad("Invalid input received: id must be an integer")),
        }
    };
    let not_found = || ApiError::NotFound(format!("Service {id} could not be found."));
    let Some((cell, s)) = find(&app, key).await? else {
        return Err(not_found());
    };
    let db = app.cells.db(&cell).await?;
    let nodes =
        match db.service_delete(s.id).await? {
            ServiceDeleted::Deleted { nodes } => nodes,
            ServiceDeleted::NotFound => return Err(not_found()),
            ServiceDeleted::HasInstances => return Err(ApiError::Conflict(
                "Unable to delete compute service that is hosting instances. Migrate or delete \
                 the instances first."
                    .into(),
            )),
        };
    if s.binary == COMPUTE_BINARY {
        let api = app.db().api();
        for agg in api.host_aggregates(&s.host).await? {
            api.aggregate_remove_host(agg.id, &s.host).await?.ok();
        }
        api.delete_host(cell.id, &s.host).await?;
        let placement = app.placement.clone();
        for rp in &nodes {
            if let Err(e) = placement.delete_provider(rp).await {
                tracing::warn!(provider = %rp, host = %s.host, error = %e,
                    "could not delete the resource provider of a deleted compute service");
            }
        }
        app.conductor().scheduler().host_state().invalidate();
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
