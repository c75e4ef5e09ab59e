//! `/os-hosts` (deprecated, gone from 2.43; `openstack host list` and
//! `host show` still use it): the hosts of every cell's services, one
//! host's resources, and the host switches.
//!
//! - `GET /os-hosts` (`zone` filter): each enabled service of every cell
//!   but the API's, as `{host_name, service (its topic), zone}`; a compute
//!   in its aggregate's zone (else the default zone), others `internal`.
//! - `GET /os-hosts/{host}`: the host's first compute node's totals
//!   (`(total)`), its use (`(used_now)`), the sum over its instances
//!   (`(used_max)`) and one row per project with instances there.
//! - `PUT /os-hosts/{host}` (`status`, `maintenance_mode`) and `GET
//!   /os-hosts/{host}/startup|shutdown|reboot`: the host is looked up as
//!   Nova does (404 when it is not mapped to a cell or has no compute
//!   service), then 501: no driver of this region switches a host or its
//!   power from here (Nova's libvirt driver does neither; disabling a
//!   compute is `os-services`).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::{Extension, Json};
use cell_mapping::CellMapping;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::servers::parse_query;
use super::services::{each_cell, host_zones, COMPUTE_BINARY, INTERNAL_ZONE};
use super::{App, Ctx};

/// Removed at 2.43: the routes are gone, whatever the caller's role.
fn before_2_43(ctx: &Ctx) -> ApiResult<()> {
    if ctx.mv.at_least(43) {
        return Err(ApiError::NotFound(
            "The resource could not be found.".into(),
        ));
    }
    Ok(())
}

/// Services of the API itself, which Nova leaves out of the list.
const API_BINARIES: &[&str] = &["nova-osapi_compute", "nova-metadata"];

/// `GET /os-hosts`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    before_2_43(&ctx)?;
    app.authorize(&ctx, "os_compute_api:os-hosts:list", ctx.project_id())?;
    let q = parse_query(raw.as_deref());
    let zone = q.get("zone").filter(|z| !z.is_empty()).cloned();
    let (zones, default) = host_zones(&app).await?;
    let per_cell = each_cell(&app, |db| async move { db.services_list(None, None).await }).await?;
    let mut hosts = Vec::new();
    for s in per_cell.into_iter().flat_map(|(_, v)| v) {
        if s.disabled || API_BINARIES.contains(&s.binary.as_str()) {
            continue;
        }
        let z = if s.binary == COMPUTE_BINARY {
            zones
                .get(&s.host)
                .cloned()
                .unwrap_or_else(|| default.clone())
        } else {
            INTERNAL_ZONE.to_owned()
        };
        if zone.as_ref().is_some_and(|want| *want != z) {
            continue;
        }
        let topic = s
            .topic
            .clone()
            .unwrap_or_else(|| s.binary.trim_start_matches("nova-").to_owned());
        hosts.push(json!({"host_name": s.host, "service": topic, "zone": z}));
    }
    Ok(Json(json!({ "hosts": hosts })))
}

/// The cell `host` is mapped to (Nova's `HostMappingNotFound`: 404).
async fn mapped_cell(app: &App, host: &str) -> ApiResult<CellMapping> {
    let unmapped = || ApiError::NotFound(format!("Host '{host}' is not mapped to any cell"));
    let id = app.db.api().host_cell(host).await?.ok_or_else(unmapped)?;
    app.cells.by_id(id).ok_or_else(unmapped)
}

fn resource(host: &str, project: &str, cpu: i64, memory_mb: i64, disk_gb: i64) -> Value {
    json!({"resource": {
        "host": host, "project": project, "cpu": cpu, "memory_mb": memory_mb, "disk_gb": disk_gb,
    }})
}

/// `GET /os-hosts/{host}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(host): Path<String>,
) -> ApiResult<Json<Value>> {
    before_2_43(&ctx)?;
    app.authorize(&ctx, "os_compute_api:os-hosts:show", ctx.project_id())?;
    let cell = mapped_cell(&app, &host).await?;
    let db = app.cells.db(&cell).await?;
    let node = db
        .hypervisors()
        .await?
        .into_iter()
        .filter(|n| n.host == host)
        .min_by_key(|n| n.id)
        .ok_or_else(|| ApiError::NotFound(format!("Compute host {host} could not be found.")))?;
    let instances = db.host_instance_resources(&host).await?;
    let mut out = vec![
        resource(&host, "(total)", node.vcpus, node.memory_mb, node.local_gb),
        resource(
            &host,
            "(used_now)",
            node.vcpus_used,
            node.memory_mb_used,
            node.local_gb_used,
        ),
    ];
    let (mut cpu, mut mem, mut disk) = (0, 0, 0);
    let mut by_project: BTreeMap<&str, (i64, i64, i64)> = BTreeMap::new();
    for (project, vcpus, memory_mb, disk_gb) in &instances {
        cpu += vcpus;
        mem += memory_mb;
        disk += disk_gb;
        let e = by_project.entry(project.as_str()).or_default();
        e.0 += vcpus;
        e.1 += memory_mb;
        e.2 += disk_gb;
    }
    out.push(resource(&host, "(used_max)", cpu, mem, disk));
    out.extend(
        by_project
            .into_iter()
            .map(|(p, (c, m, d))| resource(&host, p, c, m, d)),
    );
    Ok(Json(json!({ "host": out })))
}

/// The host is mapped and runs a compute service (Nova's
/// `_assert_host_exists`), else 404 with Nova's words.
async fn assert_host_exists(app: &App, host: &str) -> ApiResult<()> {
    let cell = mapped_cell(app, host).await?;
    let db = app.cells.db(&cell).await?;
    if db
        .services_list(Some(host), Some(COMPUTE_BINARY))
        .await?
        .is_empty()
    {
        return Err(ApiError::NotFound(format!(
            "Host {host} could not be found."
        )));
    }
    Ok(())
}

fn not_supported() -> ApiError {
    ApiError::NotImplemented("The requested functionality is not supported.".into())
}

const SWITCH_VALUES: &[&str] = &[
    "enable", "disable", "Enable", "Disable", "ENABLE", "DISABLE",
];

/// Nova's `hosts.update` schema.
fn check_update(body: &[u8]) -> ApiResult<()> {
    let bad = |m: String| ApiError::BadRequest(m);
    let v: Value =
        serde_json::from_slice(body).map_err(|_| bad("Malformed request body".into()))?;
    let Some(o) = v.as_object() else {
        return Err(bad(format!("{v} is not of type 'object'")));
    };
    for (k, val) in o {
        if k != "status" && k != "maintenance_mode" {
            return Err(bad(format!(
                "Additional properties are not allowed ('{k}' was unexpected)"
            )));
        }
        if !val.as_str().is_some_and(|s| SWITCH_VALUES.contains(&s)) {
            let shown = match val {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let what = match val {
                Value::String(_) => {
                    let allowed: Vec<String> =
                        SWITCH_VALUES.iter().map(|v| format!("'{v}'")).collect();
                    format!("'{shown}' is not one of [{}]", allowed.join(", "))
                }
                _ => format!("{shown} is not of type 'string'"),
            };
            return Err(bad(format!(
                "Invalid input for field/attribute {k}. Value: {shown}. {what}"
            )));
        }
    }
    if o.is_empty() {
        return Err(bad("{} is not valid under any of the given schemas".into()));
    }
    Ok(())
}

/// `PUT /os-hosts/{host}`.
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(host): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    before_2_43(&ctx)?;
    // Nova's schema decorator runs before the policy check.
    check_update(&body)?;
    app.authorize(&ctx, "os_compute_api:os-hosts:update", ctx.project_id())?;
    assert_host_exists(&app, &host).await?;
    Err(not_supported())
}

/// `GET /os-hosts/{host}/{startup|shutdown|reboot}`.
pub async fn power(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((host, action)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    before_2_43(&ctx)?;
    let rule = match action.as_str() {
        "startup" => "os_compute_api:os-hosts:start",
        "shutdown" => "os_compute_api:os-hosts:shutdown",
        "reboot" => "os_compute_api:os-hosts:reboot",
        _ => {
            return Err(ApiError::NotFound(
                "The resource could not be found.".into(),
            ))
        }
    };
    app.authorize(&ctx, rule, ctx.project_id())?;
    assert_host_exists(&app, &host).await?;
    Err(not_supported())
}
