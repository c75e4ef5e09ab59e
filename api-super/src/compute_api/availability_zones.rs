//! `/os-availability-zone`: the zones of the compute services of every
//! cell. A host's zone is the `availability_zone` metadata of its
//! aggregates, else the default zone (`[compute.scheduler]
//! default_availability_zone`, "nova"); services other than computes are in
//! the `internal` zone. The list (any user) shows the zones with an
//! enabled service as available and those whose services are all disabled
//! as not available; the detail (admins) adds hosts and services.

use std::collections::BTreeMap;

use axum::extract::{RawQuery, State};
use axum::{Extension, Json};
use cell_mapping::db::ServiceRecord;
use serde_json::{json, Value};

use super::error::ApiResult;
use super::query_schema;
use super::services::{each_cell, host_zones, is_up, nova_time, COMPUTE_BINARY, INTERNAL_ZONE};
use super::{App, Ctx};

/// Every live service with its zone.
async fn services_by_zone(app: &App) -> ApiResult<BTreeMap<String, Vec<ServiceRecord>>> {
    let zones = host_zones(app).await?;
    let per_cell = each_cell(app, |db| async move { db.services_list(None, None).await }).await?;
    let mut out: BTreeMap<String, Vec<ServiceRecord>> = BTreeMap::new();
    for s in per_cell.into_iter().flat_map(|(_, v)| v) {
        let zone = if s.binary == COMPUTE_BINARY {
            zones
                .0
                .get(&s.host)
                .cloned()
                .unwrap_or_else(|| zones.1.clone())
        } else {
            INTERNAL_ZONE.to_owned()
        };
        out.entry(zone).or_default().push(s);
    }
    Ok(out)
}

/// `GET /os-availability-zone`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    app.authorize(
        &ctx,
        "os_compute_api:os-availability-zone:list",
        ctx.project_id(),
    )?;
    let zones = services_by_zone(&app).await?;
    let info: Vec<Value> = zones
        .iter()
        .filter(|(z, _)| z.as_str() != INTERNAL_ZONE)
        .map(|(z, services)| {
            let available = services.iter().any(|s| !s.disabled);
            json!({"zoneName": z, "zoneState": {"available": available}, "hosts": null})
        })
        .collect();
    Ok(Json(json!({ "availabilityZoneInfo": info })))
}

/// `GET /os-availability-zone/detail`.
pub async fn detail(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    app.authorize(
        &ctx,
        "os_compute_api:os-availability-zone:detail",
        ctx.project_id(),
    )?;
    let zones = services_by_zone(&app).await?;
    let info: Vec<Value> = zones
        .iter()
        .map(|(z, services)| {
            let mut hosts: BTreeMap<&str, BTreeMap<&str, Value>> = BTreeMap::new();
            for s in services {
                hosts.entry(&s.host).or_default().insert(
                    &s.binary,
                    json!({
                        "available": is_up(&app, s.forced_down, s.last_seen_up),
                        "active": !s.disabled,
                        "updated_at": s.updated_at.or(s.last_seen_up).map(nova_time),
                    }),
                );
            }
            let available = services.iter().any(|s| !s.disabled);
            json!({"zoneName": z, "zoneState": {"available": available}, "hosts": hosts})
        })
        .collect();
    Ok(Json(json!({ "availabilityZoneInfo": info })))
}
