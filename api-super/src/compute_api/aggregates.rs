//! `/os-aggregates`: host aggregates (list, create with a zone, show,
//! update, delete when empty) and `POST /os-aggregates/{id}/action`
//! (`add_host`, `remove_host`, `set_metadata`); `uuid` from 2.41. Admin
//! only.
//!
//! Adding or removing a host is mirrored into placement as Nova does: the
//! aggregate's UUID is added to or removed from the aggregates of the
//! host's resource providers (read, then written with the provider
//! generation, retried on a conflict a bounded number of times). As in
//! Nova, a failed mirror does not fail the API call; it is logged at
//! warning with the host, aggregate and cause and counted in
//! `api_aggregate_placement_sync_failures_total`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use cell_mapping::db::{Aggregate, AggregateRefused};
use serde_json::{json, Map, Value};

use super::body_schema::{self, member, MetaValues};
use super::error::{ApiError, ApiResult};
use super::query_schema::{
    self, invalid_field, not_of_type, python_repr, python_value_repr as py_repr, too_long,
};
use super::servers::schema::{fqdn_error, name_field};
use super::services::nova_time;
use super::{App, Ctx};
use crate::scheduler::placement::change_provider_aggregate;

/// Counter: placement mirror failures of aggregate host changes.
pub const SYNC_FAILURES: &str = "api_aggregate_placement_sync_failures_total";

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

fn view(ctx: &Ctx, a: &Aggregate, full: bool) -> Value {
    let mut v = json!({
        "id": a.id,
        "name": a.name,
        "availability_zone": a.availability_zone(),
        "created_at": nova_time(a.created_at),
        "updated_at": a.updated_at.map(nova_time),
        "deleted": false,
        "deleted_at": null,
    });
    if full {
        v["hosts"] = json!(a.hosts);
        v["metadata"] = json!(a.metadata);
    }
    if ctx.mv.at_least(41) {
        v["uuid"] = json!(a.uuid);
    }
    v
}

/// Nova's `utils.validate_integer(id, 'id')`.
fn parse_id(id: &str) -> ApiResult<i64> {
    id.trim()
        .parse::<i64>()
        .map_err(|_| bad("Invalid input received: id must be an integer"))
}

fn not_found(id: i64) -> ApiError {
    ApiError::NotFound(format!("Aggregate {id} could not be found."))
}

async fn get(app: &App, id: i64) -> ApiResult<Aggregate> {
    app.db()
        .api()
        .aggregate(id)
        .await?
        .ok_or_else(|| not_found(id))
}

/// Nova's `InvalidName` message for a name format.
fn invalid_name(reason: &str) -> ApiError {
    bad(format!(
        "An invalid 'name' value was provided. The name must be: {reason}"
    ))
}

/// An update's `name` (`parameter_types.name_with_leading_trailing_spaces`:
/// at least one printable non-space character, 1–255 characters),
/// normalized as Nova's `common.normalize_name` (outer spaces dropped).
fn spaced_name(v: &Value) -> ApiResult<String> {
    let Value::String(s) = v else {
        return Err(invalid_field("name", v, &not_of_type(v, "'string'")));
    };
    if s.chars().any(char::is_control) || (!s.is_empty() && s.trim().is_empty()) {
        return Err(invalid_name(
            "printable characters with at least one non space character",
        ));
    }
    if s.is_empty() {
        return Err(invalid_field("name", v, "'' is too short"));
    }
    if s.chars().count() > 255 {
        return Err(invalid_field("name", v, &too_long(v)));
    }
    Ok(s.trim().to_owned())
}

/// `availability_zone` of a create or update (`oneOf` Nova's `az_name`
/// and null): `None` absent, `Some(None)` null. A value that is neither
/// gets `oneOf`'s message.
fn zone_field(o: &Map<String, Value>) -> ApiResult<Option<Option<String>>> {
    let v = match o.get("availability_zone") {
        None => return Ok(None),
        Some(Value::Null) => return Ok(Some(None)),
        Some(v) => v,
    };
    match v {
        Value::String(z)
            if !z.is_empty()
                && z.chars().count() <= 255
                && z.trim() == z
                && !z.contains(':')
                && !z.chars().any(char::is_control) =>
        {
            Ok(Some(Some(z.clone())))
        }
        v => Err(invalid_field(
            "availability_zone",
            v,
            &format!("{} is not valid under any of the given schemas", py_repr(v)),
        )),
    }
}

/// `host` of `add_host` / `remove_host` (`parameter_types.fqdn`).
fn host_field(v: &Value) -> ApiResult<String> {
    match v {
        Value::String(h)
            if !h.is_empty()
                && h.chars().count() <= 255
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) =>
        {
            Ok(h.clone())
        }
        v => Err(fqdn_error("host", v)),
    }
}

fn refused(id: i64, r: AggregateRefused, name: Option<&str>) -> ApiError {
    let name = name.unwrap_or_default();
    match r {
        AggregateRefused::NotFound => not_found(id),
        AggregateRefused::NameExists => {
            ApiError::Conflict(format!("Aggregate {name} already exists."))
        }
        AggregateRefused::HostExists => {
            ApiError::Conflict(format!("Aggregate {id} already has host {name}."))
        }
        AggregateRefused::HostNotFound => {
            ApiError::NotFound(format!("Cannot remove host {name} in aggregate {id}"))
        }
        // Nova's `InvalidAggregateActionDelete`, whose wording is the
        // remove-host one.
        AggregateRefused::NotEmpty => bad(format!(
            "Cannot remove host from aggregate {id}. Reason: Host aggregate is not empty."
        )),
    }
}

/// Which of Nova's aggregate actions a zone check refuses (its
/// `InvalidAggregateAction*` wording).
#[derive(Clone, Copy)]
enum ZoneCheck {
    Add,
    Update,
    UpdateMeta,
}

impl ZoneCheck {
    fn refuse(self, id: i64, reason: &str) -> ApiError {
        match self {
            // `add_host` answers its refusals 409.
            ZoneCheck::Add => ApiError::Conflict(format!(
                "Cannot add host to aggregate {id}. Reason: {reason}."
            )),
            ZoneCheck::Update => bad(format!("Cannot update aggregate {id}. Reason: {reason}.")),
            ZoneCheck::UpdateMeta => bad(format!(
                "Cannot update metadata of aggregate {id}. Reason: {reason}."
            )),
        }
    }
}

/// Nova's `is_safe_to_update_az`: an empty zone is refused, and so is a
/// zone that would put one of `hosts` in two zones (the other zones named
/// as Nova's list, one per aggregate, in id order).
async fn check_zone(
    app: &App,
    a: &Aggregate,
    hosts: &[String],
    zone: Option<&str>,
    check: ZoneCheck,
) -> ApiResult<()> {
    let Some(zone) = zone.filter(|z| !z.is_empty()) else {
        return Err(check.refuse(
            a.id,
            &format!(
                "Aggregate {} does not support empty named availability zone",
                a.name
            ),
        ));
    };
    let all = app.db().api().aggregates(None).await?;
    let clash: Vec<String> = all
        .iter()
        .filter(|o| o.id != a.id && o.hosts.iter().any(|h| hosts.contains(h)))
        .filter_map(|o| o.availability_zone())
        .filter(|z| *z != zone)
        .map(python_repr)
        .collect();
    if !clash.is_empty() {
        return Err(check.refuse(
            a.id,
            &format!(
                "One or more hosts already in availability zone(s) [{}]",
                clash.join(", ")
            ),
        ));
    }
    // An update that changes the zone: no host may hold instances (they
    // would change zone), as Nova's `check_no_instances_in_az`.
    if !matches!(check, ZoneCheck::Add) && a.availability_zone() != Some(zone) {
        for h in hosts {
            if host_instances(app, h).await? > 0 {
                return Err(check.refuse(a.id, "One or more hosts contain instances in this zone"));
            }
        }
    }
    Ok(())
}

/// `GET /os-aggregates`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-aggregates:index", ctx.project_id())?;
    let all = app.db().api().aggregates(None).await?;
    let items: Vec<Value> = all.iter().map(|a| view(&ctx, a, true)).collect();
    Ok(Json(json!({ "aggregates": items })))
}

/// `POST /os-aggregates` (200, as Nova, without `hosts` and `metadata`).
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v = body_schema::parse(&body)?;
    let (name, zone) = member(
        &v,
        "aggregate",
        &["name", "availability_zone"],
        &["name"],
        |o| Ok((o.get("name").map(name_field).transpose()?, zone_field(o)?)),
    )?;
    let (name, zone) = (name.unwrap_or_default(), zone.flatten());
    app.authorize(
        &ctx,
        "os_compute_api:os-aggregates:create",
        ctx.project_id(),
    )?;
    let id = app
        .db()
        .api()
        .aggregate_create(&name, zone.as_deref())
        .await?
        .map_err(|r| refused(0, r, Some(&name)))?;
    let a = get(&app, id).await?;
    Ok(Json(json!({ "aggregate": view(&ctx, &a, false) })))
}

/// `GET /os-aggregates/{id}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-aggregates:show", ctx.project_id())?;
    let a = get(&app, parse_id(&id)?).await?;
    Ok(Json(json!({ "aggregate": view(&ctx, &a, true) })))
}

/// `PUT /os-aggregates/{id}`: name and/or zone (a null or empty zone is
/// refused, as Nova).
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v = body_schema::parse(&body)?;
    let (name, zone) = member(&v, "aggregate", &["name", "availability_zone"], &[], |o| {
        Ok((o.get("name").map(spaced_name).transpose()?, zone_field(o)?))
    })?;
    if name.is_none() && zone.is_none() {
        return Err(invalid_field(
            "aggregate",
            &v["aggregate"],
            &format!(
                "{} is not valid under any of the given schemas",
                py_repr(&v["aggregate"])
            ),
        ));
    }
    app.authorize(
        &ctx,
        "os_compute_api:os-aggregates:update",
        ctx.project_id(),
    )?;
    let id = parse_id(&id)?;
    let a = get(&app, id).await?;
    if let Some(z) = &zone {
        check_zone(&app, &a, &a.hosts, z.as_deref(), ZoneCheck::Update).await?;
    }
    app.db()
        .api()
        .aggregate_update(id, name.as_deref(), zone.as_ref().map(|z| z.as_deref()))
        .await?
        .map_err(|r| refused(id, r, name.as_deref()))?;
    app.conductor().scheduler().host_state().invalidate();
    let a = get(&app, id).await?;
    Ok(Json(json!({ "aggregate": view(&ctx, &a, true) })))
}

/// `DELETE /os-aggregates/{id}`: 200 without a body, as Nova (an
/// aggregate with hosts: 400).
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    app.authorize(
        &ctx,
        "os_compute_api:os-aggregates:delete",
        ctx.project_id(),
    )?;
    let id = parse_id(&id)?;
    app.db()
        .api()
        .aggregate_delete(id)
        .await?
        .map_err(|r| refused(id, r, None))?;
    app.conductor().scheduler().host_state().invalidate();
    Ok(StatusCode::OK)
}

/// `POST /os-aggregates/{id}/action`: the one key of the body names the
/// action (Nova's `action_peek`); the body is checked against the
/// action's schema before its policy, and the id after it, as Nova does.
/// Each answers 200 with the aggregate.
pub async fn action(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v = body_schema::parse(&body)?;
    let Some(name) = v
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.keys().next())
    else {
        return Err(bad("Malformed request body"));
    };
    match name.as_str() {
        "add_host" | "remove_host" => {
            let host = member(&v, name, &["host"], &["host"], |o| {
                o.get("host").map(host_field).transpose()
            })?
            .unwrap_or_default();
            let rule = format!("os_compute_api:os-aggregates:{name}");
            app.authorize(&ctx, &rule, ctx.project_id())?;
            let id = parse_id(&id)?;
            host_change(&app, &ctx, id, &host, name == "add_host").await
        }
        "set_metadata" => {
            let changes = member(&v, name, &["metadata"], &["metadata"], |o| {
                o.get("metadata")
                    .map(|m| body_schema::metadata(Some("metadata"), m, MetaValues::OrNull))
                    .transpose()
            })?
            .unwrap_or_default();
            app.authorize(
                &ctx,
                "os_compute_api:os-aggregates:set_metadata",
                ctx.project_id(),
            )?;
            let id = parse_id(&id)?;
            set_metadata(&app, &ctx, id, &changes).await
        }
        other => Err(bad(format!("There is no such action: {other}"))),
    }
}

async fn set_metadata(
    app: &App,
    ctx: &Ctx,
    id: i64,
    changes: &BTreeMap<String, Option<String>>,
) -> ApiResult<Json<Value>> {
    let a = get(app, id).await?;
    if let Some(z) = changes.get(cell_mapping::db::aggregates::AZ_KEY) {
        check_zone(app, &a, &a.hosts, z.as_deref(), ZoneCheck::UpdateMeta).await?;
    }
    app.db()
        .api()
        .aggregate_set_metadata(id, changes)
        .await?
        .map_err(|r| refused(id, r, None))?;
    app.conductor().scheduler().host_state().invalidate();
    let a = get(app, id).await?;
    Ok(Json(json!({ "aggregate": view(ctx, &a, true) })))
}

/// The compute nodes (placement providers) of a mapped host; 404 when the
/// host is no compute host.
async fn host_providers(app: &App, host: &str) -> ApiResult<Vec<String>> {
    let missing = || ApiError::NotFound(format!("Compute host {host} could not be found."));
    let cell_id = app.db().api().host_cell(host).await?.ok_or_else(missing)?;
    let cell = app.cells.by_id(cell_id).ok_or_else(missing)?;
    let db = app.cells.db(&cell).await?;
    let nodes: Vec<String> = db
        .hypervisors()
        .await?
        .into_iter()
        .filter(|n| n.host == host)
        .map(|n| n.uuid)
        .collect();
    if nodes.is_empty() {
        return Err(missing());
    }
    Ok(nodes)
}

/// Live instances on `host` (in its cell; 0 for a host no cell maps).
async fn host_instances(app: &App, host: &str) -> ApiResult<i64> {
    let Some(cell) = app
        .db()
        .api()
        .host_cell(host)
        .await?
        .and_then(|id| app.cells.by_id(id))
    else {
        return Ok(0);
    };
    Ok(app
        .cells
        .db(&cell)
        .await?
        .count_live_instances(Some(host))
        .await?)
}

/// The zone `host` has through its aggregates other than `except`.
async fn host_zone(app: &App, host: &str, except: Option<i64>) -> ApiResult<Option<String>> {
    Ok(app
        .db()
        .api()
        .host_aggregates(host)
        .await?
        .iter()
        .filter(|a| Some(a.id) != except)
        .find_map(|a| a.availability_zone().map(str::to_owned)))
}

/// Nova's `ensure_no_instances_need_to_move_az_when_host_added` /
/// `…_removed`: a host with instances may not change zone by joining or
/// leaving `a` (409, in the add's or the remove's words).
async fn check_no_move(app: &App, a: &Aggregate, host: &str, add: bool) -> ApiResult<()> {
    let Some(zone) = a.availability_zone() else {
        return Ok(());
    };
    let n = host_instances(app, host).await?;
    if n == 0 {
        return Ok(());
    }
    let other = host_zone(app, host, (!add).then_some(a.id)).await?;
    let (from, to) = if add {
        (other.as_deref(), Some(zone))
    } else {
        (Some(zone), other.as_deref())
    };
    if from == to {
        return Ok(());
    }
    let (verb, at) = if add {
        ("added to", "add host to")
    } else {
        ("removed from", "remove host from")
    };
    Err(ApiError::Conflict(format!(
        "Cannot {at} aggregate {}. Reason: The host cannot be {verb} the aggregate as the \
         availability zone of the host would change from '{}' to '{}' but the host already \
         has {n} instance(s). Changing the AZ of an existing instance is not supported by \
         this action. Move the instances away from this host then try again. If you need to \
         move the instances between AZs then you can use shelve_offload and unshelve to \
         achieve this..",
        a.id,
        from.unwrap_or("None"),
        to.unwrap_or("None"),
    )))
}

async fn host_change(
    app: &App,
    ctx: &Ctx,
    id: i64,
    host: &str,
    add: bool,
) -> ApiResult<Json<Value>> {
    let api = app.db().api();
    // Nova looks the compute host up before the aggregate.
    let (a, providers) = if add {
        let providers = host_providers(app, host).await?;
        let a = get(app, id).await?;
        if let Some(z) = a.availability_zone() {
            check_zone(app, &a, &[host.to_owned()], Some(z), ZoneCheck::Add).await?;
        }
        check_no_move(app, &a, host, true).await?;
        api.aggregate_add_host(id, host)
            .await?
            .map_err(|r| refused(id, r, Some(host)))?;
        (a, providers)
    } else {
        // Nova: an unknown host or aggregate, or a host not in it, is one
        // 404 with one message.
        let gone = || refused(id, AggregateRefused::HostNotFound, Some(host));
        let providers = host_providers(app, host).await.map_err(|e| match e {
            ApiError::NotFound(_) => gone(),
            e => e,
        })?;
        let a = get(app, id).await.map_err(|e| match e {
            ApiError::NotFound(_) => gone(),
            e => e,
        })?;
        check_no_move(app, &a, host, false).await?;
        api.aggregate_remove_host(id, host)
            .await?
            .map_err(|_| gone())?;
        (a, providers)
    };
    app.conductor().scheduler().host_state().invalidate();
    let placement = app.placement.clone();
    for rp in providers {
        if let Err(e) = change_provider_aggregate(placement.as_ref(), &rp, &a.uuid, add).await {
            metrics::counter!(SYNC_FAILURES).increment(1);
            tracing::warn!(
                host, provider = %rp, aggregate = %a.uuid, add, error = %e,
                "could not mirror the aggregate host change into placement"
            );
        }
    }
    let a = get(app, id).await?;
    Ok(Json(json!({ "aggregate": view(ctx, &a, true) })))
}
