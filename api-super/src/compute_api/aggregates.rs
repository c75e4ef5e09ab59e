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

use std::collections::{BTreeMap, BTreeSet};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::{Extension, Json};
use cell_mapping::db::{Aggregate, AggregateRefused};
use serde_json::{json, Map, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema;
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

fn parse_id(id: &str) -> ApiResult<i64> {
    id.parse::<i64>()
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

fn body_of<'a>(v: &'a Value, key: &str) -> ApiResult<&'a Map<String, Value>> {
    match v.get(key) {
        Some(Value::Object(o)) => Ok(o),
        Some(other) => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {other}. {other} is not of type 'object'"
        ))),
        None => Err(bad(format!(
            "Invalid input for field/attribute body. '{key}' is a required property"
        ))),
    }
}

fn parse_body(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|_| bad("Malformed request body"))
}

/// A name-like string: 1..255 characters, no leading/trailing blanks.
fn name_field(o: &Map<String, Value>, key: &str) -> ApiResult<Option<String>> {
    match o.get(key) {
        None => Ok(None),
        Some(Value::String(s))
            if !s.trim().is_empty() && s.trim() == s && s.chars().count() <= 255 =>
        {
            Ok(Some(s.clone()))
        }
        Some(v) => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. {v} is not a valid name"
        ))),
    }
}

/// `availability_zone`: absent, null or a name (no `:`, as Nova's
/// `az:host` syntax would be ambiguous).
fn zone_field(o: &Map<String, Value>) -> ApiResult<Option<Option<String>>> {
    match o.get("availability_zone") {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(_) => {
            let z = name_field(o, "availability_zone")?;
            if z.as_deref().is_some_and(|z| z.contains(':')) {
                return Err(bad(
                    "Invalid input for field/attribute availability_zone. An availability zone \
                     name cannot contain ':'",
                ));
            }
            Ok(Some(z))
        }
    }
}

fn refused(id: i64, r: AggregateRefused, name: Option<&str>) -> ApiError {
    match r {
        AggregateRefused::NotFound => not_found(id),
        AggregateRefused::NameExists => ApiError::Conflict(format!(
            "Aggregate {} already exists.",
            name.unwrap_or_default()
        )),
        AggregateRefused::HostExists => ApiError::Conflict(format!(
            "Aggregate {id} already has host {}.",
            name.unwrap_or_default()
        )),
        AggregateRefused::HostNotFound => ApiError::NotFound(format!(
            "Aggregate {id} has no host {}.",
            name.unwrap_or_default()
        )),
        AggregateRefused::NotEmpty => bad(format!(
            "Invalid action 'delete' on aggregate {id}. Reason: Host aggregate is not empty."
        )),
    }
}

/// The zones other than `zone` that the hosts are in through aggregates
/// other than `except`.
async fn conflicting_zones(
    app: &App,
    hosts: &[String],
    except: i64,
    zone: &str,
) -> ApiResult<BTreeSet<String>> {
    let all = app.db().api().aggregates(None).await?;
    Ok(all
        .iter()
        .filter(|a| a.id != except && a.hosts.iter().any(|h| hosts.contains(h)))
        .filter_map(|a| a.availability_zone())
        .filter(|z| *z != zone)
        .map(str::to_owned)
        .collect())
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

/// `POST /os-aggregates`.
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    app.authorize(
        &ctx,
        "os_compute_api:os-aggregates:create",
        ctx.project_id(),
    )?;
    let v = parse_body(&body)?;
    let o = body_of(&v, "aggregate")?;
    if let Some(k) = o
        .keys()
        .find(|k| !matches!(k.as_str(), "name" | "availability_zone"))
    {
        return Err(bad(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let name = name_field(o, "name")?.ok_or_else(|| {
        bad("Invalid input for field/attribute aggregate. 'name' is a required property")
    })?;
    let zone = zone_field(o)?.flatten();
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

/// `PUT /os-aggregates/{id}`: name and/or zone.
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    app.authorize(
        &ctx,
        "os_compute_api:os-aggregates:update",
        ctx.project_id(),
    )?;
    let id = parse_id(&id)?;
    let v = parse_body(&body)?;
    let o = body_of(&v, "aggregate")?;
    if let Some(k) = o
        .keys()
        .find(|k| !matches!(k.as_str(), "name" | "availability_zone"))
    {
        return Err(bad(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    if o.is_empty() {
        return Err(bad(
            "Invalid input for field/attribute aggregate. Value: {}. {} does not have enough properties",
        ));
    }
    let name = name_field(o, "name")?;
    let zone = zone_field(o)?;
    let a = get(&app, id).await?;
    if let Some(Some(z)) = &zone {
        let clash = conflicting_zones(&app, &a.hosts, id, z).await?;
        if !clash.is_empty() {
            return Err(bad(format!(
                "Cannot update aggregate {id}. Reason: One or more hosts already in \
                 availability zone(s) {clash:?}."
            )));
        }
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

/// `DELETE /os-aggregates/{id}` (an aggregate with hosts: 400).
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
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
    Ok(Json(json!({})))
}

/// `POST /os-aggregates/{id}/action`.
pub async fn action(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v = parse_body(&body)?;
    let Some(o) = v.as_object().filter(|o| o.len() == 1) else {
        return Err(bad(
            "Invalid input for field/attribute body. Exactly one of 'add_host', 'remove_host' \
             or 'set_metadata' is required",
        ));
    };
    let (name, _) = o.iter().next().expect("one key");
    match name.as_str() {
        "add_host" | "remove_host" => {
            let rule = format!("os_compute_api:os-aggregates:{name}");
            app.authorize(&ctx, &rule, ctx.project_id())?;
            let id = parse_id(&id)?;
            let b = body_of(&v, name)?;
            let host = name_field(b, "host")?.ok_or_else(|| {
                bad(format!(
                    "Invalid input for field/attribute {name}. 'host' is a required property"
                ))
            })?;
            if b.len() != 1 {
                return Err(bad(
                    "Additional properties are not allowed (only 'host' is expected)",
                ));
            }
            host_change(&app, &ctx, id, &host, name == "add_host").await
        }
        "set_metadata" => {
            app.authorize(
                &ctx,
                "os_compute_api:os-aggregates:set_metadata",
                ctx.project_id(),
            )?;
            let id = parse_id(&id)?;
            let b = body_of(&v, name)?;
            let meta = body_of(&Value::Object(b.clone()), "metadata")?.clone();
            set_metadata(&app, &ctx, id, &meta).await
        }
        other => Err(bad(format!(
            "Invalid input for field/attribute body. Unknown action '{other}'"
        ))),
    }
}

async fn set_metadata(
    app: &App,
    ctx: &Ctx,
    id: i64,
    meta: &Map<String, Value>,
) -> ApiResult<Json<Value>> {
    let mut changes: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (k, v) in meta {
        if k.is_empty() || k.chars().count() > 255 {
            return Err(bad(format!(
                "Invalid input for field/attribute metadata. Key '{k}' must be 1 to 255 characters"
            )));
        }
        let value = match v {
            Value::Null => None,
            Value::String(s) if s.chars().count() <= 255 => Some(s.clone()),
            other => {
                return Err(bad(format!(
                    "Invalid input for field/attribute {k}. Value: {other}. {other} is not of type 'string', 'null'"
                )))
            }
        };
        changes.insert(k.clone(), value);
    }
    let a = get(app, id).await?;
    if let Some(Some(z)) = changes.get(cell_mapping::db::aggregates::AZ_KEY) {
        if z.contains(':') || z.trim().is_empty() {
            return Err(bad(format!(
                "Invalid input for field/attribute availability_zone. Value: {z}."
            )));
        }
        let clash = conflicting_zones(app, &a.hosts, id, z).await?;
        if !clash.is_empty() {
            return Err(bad(format!(
                "Cannot update metadata of aggregate {id}. Reason: One or more hosts already in \
                 availability zone(s) {clash:?}."
            )));
        }
    }
    app.db()
        .api()
        .aggregate_set_metadata(id, &changes)
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

async fn host_change(
    app: &App,
    ctx: &Ctx,
    id: i64,
    host: &str,
    add: bool,
) -> ApiResult<Json<Value>> {
    let a = get(app, id).await?;
    let api = app.db().api();
    let providers = if add {
        let providers = host_providers(app, host).await?;
        if let Some(z) = a.availability_zone() {
            let clash = conflicting_zones(app, &[host.to_owned()], id, z).await?;
            if !clash.is_empty() {
                return Err(ApiError::Conflict(format!(
                    "Cannot add host to aggregate {id}. Reason: One or more hosts already in \
                     availability zone(s) {clash:?}."
                )));
            }
        }
        api.aggregate_add_host(id, host)
            .await?
            .map_err(|r| refused(id, r, Some(host)))?;
        providers
    } else {
        if !a.hosts.iter().any(|h| h == host) {
            // Nova: an unknown host is 404 too, with the same message.
            return Err(refused(id, AggregateRefused::HostNotFound, Some(host)));
        }
        api.aggregate_remove_host(id, host)
            .await?
            .map_err(|r| refused(id, r, Some(host)))?;
        // A host whose compute is gone has no provider to update.
        host_providers(app, host).await.unwrap_or_default()
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
