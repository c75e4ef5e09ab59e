//! `/os-hypervisors`: the compute nodes of every cell, merged (cell order,
//! then id). List and detail (`hypervisor_hostname_pattern` and
//! `with_servers` from 2.53, `limit`/`marker` from 2.33, UUID ids from 2.53,
//! the resource fields dropped at 2.88), show (`with_servers`), the
//! pre-2.53 `/{hostname}/search` and `/{hostname}/servers`, and
//! `/statistics` below 2.88. Admin only.

use axum::extract::{Path, RawQuery, State};
use axum::{Extension, Json};
use cell_mapping::db::HypervisorRecord;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::servers::parse_query;
use super::services::{each_cell, is_up};
use super::{App, Ctx};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// A node with, when asked for, its instances.
struct Node {
    rec: HypervisorRecord,
    servers: Option<Vec<(String, String)>>,
}

/// Every live compute node of every reachable cell, cell by cell.
async fn load(app: &App) -> ApiResult<Vec<Node>> {
    let per_cell = each_cell(app, |db| async move { db.hypervisors().await }).await?;
    Ok(per_cell
        .into_iter()
        .flat_map(|(_, v)| v)
        .map(|rec| Node { rec, servers: None })
        .collect())
}

/// Fills in the instances of `nodes`.
async fn with_servers(app: &App, nodes: &mut [Node]) -> ApiResult<()> {
    let per_cell = each_cell(app, |db| {
        let wanted: Vec<(String, String)> = nodes
            .iter()
            .map(|n| (n.rec.host.clone(), n.rec.hypervisor_hostname.clone()))
            .collect();
        async move {
            let mut out = Vec::new();
            for (h, n) in wanted {
                let list = db.instances_on_node(&h, &n).await?;
                if !list.is_empty() {
                    out.push((h, n, list));
                }
            }
            Ok(out)
        }
    })
    .await?;
    for (_, found) in per_cell {
        for (h, n, list) in found {
            if let Some(node) = nodes
                .iter_mut()
                .find(|x| x.rec.host == h && x.rec.hypervisor_hostname == n)
            {
                node.servers.get_or_insert_with(Vec::new).extend(list);
            }
        }
    }
    Ok(())
}

fn api_id(ctx: &Ctx, n: &HypervisorRecord) -> Value {
    if ctx.mv.at_least(53) {
        json!(n.uuid)
    } else {
        json!(n.id)
    }
}

fn brief(app: &App, ctx: &Ctx, n: &Node) -> Value {
    let r = &n.rec;
    let mut v = json!({
        "id": api_id(ctx, r),
        "hypervisor_hostname": r.hypervisor_hostname,
        "state": if is_up(app, r.service_forced_down.unwrap_or(false), r.service_last_seen_up) { "up" } else { "down" },
        "status": if r.service_disabled.unwrap_or(false) { "disabled" } else { "enabled" },
    });
    if let Some(s) = &n.servers {
        v["servers"] = s
            .iter()
            .map(|(uuid, name)| json!({"uuid": uuid, "name": name}))
            .collect();
    }
    v
}

fn detail(app: &App, ctx: &Ctx, n: &Node) -> Value {
    let r = &n.rec;
    let mut v = brief(app, ctx, n);
    v["hypervisor_type"] = json!(r.hypervisor_type);
    v["hypervisor_version"] = json!(r.hypervisor_version);
    v["host_ip"] = json!(r.host_ip);
    v["service"] = json!({
        "host": r.host,
        "id": if ctx.mv.at_least(53) { json!(r.service_uuid) } else { json!(r.service_id) },
        "disabled_reason": r.service_disabled_reason,
    });
    if ctx.mv.at_least(88) {
        v["uptime"] = Value::Null;
    } else {
        let cpu_info = r.cpu_info.clone().unwrap_or_else(|| "{}".into());
        v["cpu_info"] = if ctx.mv.at_least(28) {
            serde_json::from_str(&cpu_info).unwrap_or_else(|_| json!({}))
        } else {
            json!(cpu_info)
        };
        v["vcpus"] = json!(r.vcpus);
        v["memory_mb"] = json!(r.memory_mb);
        v["local_gb"] = json!(r.local_gb);
        v["vcpus_used"] = json!(r.vcpus_used);
        v["memory_mb_used"] = json!(r.memory_mb_used);
        v["local_gb_used"] = json!(r.local_gb_used);
        v["free_ram_mb"] = json!(r.free_ram_mb.unwrap_or(r.memory_mb - r.memory_mb_used));
        v["free_disk_gb"] = json!(r.free_disk_gb.unwrap_or(r.local_gb - r.local_gb_used));
        v["current_workload"] = json!(r.current_workload.unwrap_or(0));
        v["running_vms"] = json!(r.running_vms.unwrap_or(0));
        v["disk_available_least"] = json!(r.disk_available_least);
    }
    v
}

fn truthy(
    ctx_mv_ok: bool,
    q: &std::collections::HashMap<String, String>,
    key: &str,
) -> ApiResult<bool> {
    if !ctx_mv_ok {
        return Ok(false);
    }
    match q.get(key).map(|s| s.to_ascii_lowercase()) {
        None => Ok(false),
        Some(s) => match s.as_str() {
            "true" | "1" | "yes" | "on" | "y" | "t" => Ok(true),
            "false" | "0" | "no" | "off" | "n" | "f" => Ok(false),
            _ => Err(bad(format!(
                "Invalid input for query parameters {key}. Value: {s}. '{s}' is not one of the allowed values"
            ))),
        },
    }
}

async fn list(app: &App, ctx: &Ctx, raw: Option<&str>, is_detail: bool) -> ApiResult<Json<Value>> {
    let action = if is_detail {
        "os_compute_api:os-hypervisors:list-detail"
    } else {
        "os_compute_api:os-hypervisors:list"
    };
    app.authorize(ctx, action, ctx.project_id())?;
    let q = parse_query(raw);
    let servers = truthy(ctx.mv.at_least(53), &q, "with_servers")?;
    let pattern = if ctx.mv.at_least(53) {
        q.get("hypervisor_hostname_pattern").cloned()
    } else {
        None
    };
    let paging = ctx.mv.at_least(33);
    let limit = match q.get("limit").filter(|_| paging) {
        None => app.max_limit,
        Some(l) => match l.parse::<usize>() {
            Ok(n) => n.min(app.max_limit),
            Err(_) => {
                return Err(bad(format!(
                    "Invalid input for query parameters limit. Value: {l}. '{l}' does not match '^[0-9]*$'"
                )))
            }
        },
    };
    let marker = q.get("marker").filter(|_| paging).cloned();
    if pattern.is_some() && (q.contains_key("limit") || marker.is_some()) {
        return Err(bad(
            "Paging over hypervisors with the hypervisor_hostname_pattern query parameter is not supported.",
        ));
    }
    let mut nodes = load(app).await?;
    if let Some(p) = &pattern {
        nodes.retain(|n| n.rec.hypervisor_hostname.contains(p.as_str()));
        if nodes.is_empty() {
            return Err(ApiError::NotFound(format!(
                "No hypervisor matching '{p}' could be found."
            )));
        }
    }
    if let Some(m) = &marker {
        let pos = nodes
            .iter()
            .position(|n| api_id(ctx, &n.rec).to_string().trim_matches('"') == m)
            .ok_or_else(|| bad(format!("marker [{m}] not found")))?;
        nodes.drain(..=pos);
    }
    let more = paging && q.contains_key("limit") && nodes.len() > limit;
    nodes.truncate(limit);
    if servers {
        with_servers(app, &mut nodes).await?;
    }
    let items: Vec<Value> = nodes
        .iter()
        .map(|n| {
            if is_detail {
                detail(app, ctx, n)
            } else {
                brief(app, ctx, n)
            }
        })
        .collect();
    let mut body = json!({ "hypervisors": items });
    if more {
        if let Some(last) = nodes.last() {
            let id = api_id(ctx, &last.rec).to_string();
            let path = if is_detail {
                "os-hypervisors/detail"
            } else {
                "os-hypervisors"
            };
            body["hypervisors_links"] = json!([{"rel": "next", "href": format!(
                "{}/v2.1/{path}?limit={limit}&marker={}", app.public_url(), id.trim_matches('"'))}]);
        }
    }
    Ok(Json(body))
}

/// `GET /os-hypervisors`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::HYPERVISOR_LIST.check(ctx.mv, raw.as_deref())?;
    list(&app, &ctx, raw.as_deref(), false).await
}

/// `GET /os-hypervisors/detail`.
pub async fn index_detail(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::HYPERVISOR_LIST.check(ctx.mv, raw.as_deref())?;
    list(&app, &ctx, raw.as_deref(), true).await
}

/// `GET /os-hypervisors/{id}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::HYPERVISOR_SHOW.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-hypervisors:show", ctx.project_id())?;
    let not_found = || ApiError::NotFound(format!("Hypervisor with ID {id} could not be found."));
    let q = parse_query(raw.as_deref());
    let servers = truthy(ctx.mv.at_least(53), &q, "with_servers")?;
    let nodes = load(&app).await?;
    let mut found: Vec<Node> = if ctx.mv.at_least(53) {
        if uuid::Uuid::parse_str(&id).is_err() {
            return Err(bad(format!("Invalid uuid {id}")));
        }
        nodes.into_iter().filter(|n| n.rec.uuid == id).collect()
    } else {
        let Ok(n) = id.parse::<i64>() else {
            return Err(not_found());
        };
        let hits: Vec<Node> = nodes.into_iter().filter(|x| x.rec.id == n).collect();
        if hits.len() > 1 {
            return Err(bad(format!(
                "Hypervisor id {id} refers to more than one hypervisor (one per cell); use \
                 microversion 2.53 or later (UUID ids)."
            )));
        }
        hits
    };
    if found.is_empty() {
        return Err(not_found());
    }
    if servers {
        with_servers(&app, &mut found).await?;
    }
    Ok(Json(json!({ "hypervisor": detail(&app, &ctx, &found[0]) })))
}

/// Removed at 2.53: the route is gone, whatever the caller's role.
fn before_2_53(ctx: &Ctx) -> ApiResult<()> {
    if ctx.mv.at_least(53) {
        return Err(ApiError::NotFound(
            "The resource could not be found.".into(),
        ));
    }
    Ok(())
}

async fn by_hostname(app: &App, ctx: &Ctx, pattern: &str, servers: bool) -> ApiResult<Json<Value>> {
    let mut nodes = load(app).await?;
    nodes.retain(|n| n.rec.hypervisor_hostname.contains(pattern));
    if nodes.is_empty() {
        return Err(ApiError::NotFound(format!(
            "No hypervisor matching '{pattern}' could be found."
        )));
    }
    if servers {
        with_servers(app, &mut nodes).await?;
    }
    let items: Vec<Value> = nodes.iter().map(|n| brief(app, ctx, n)).collect();
    Ok(Json(json!({ "hypervisors": items })))
}

/// `GET /os-hypervisors/{hostname}/search` (before 2.53).
pub async fn search(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(hostname): Path<String>,
) -> ApiResult<Json<Value>> {
    before_2_53(&ctx)?;
    app.authorize(
        &ctx,
        "os_compute_api:os-hypervisors:search",
        ctx.project_id(),
    )?;
    by_hostname(&app, &ctx, &hostname, false).await
}

/// `GET /os-hypervisors/{hostname}/servers` (before 2.53).
pub async fn servers(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(hostname): Path<String>,
) -> ApiResult<Json<Value>> {
    before_2_53(&ctx)?;
    app.authorize(
        &ctx,
        "os_compute_api:os-hypervisors:servers",
        ctx.project_id(),
    )?;
    by_hostname(&app, &ctx, &hostname, true).await
}

/// `GET /os-hypervisors/statistics` (before 2.88).
pub async fn statistics(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
) -> ApiResult<Json<Value>> {
    if ctx.mv.at_least(88) {
        return Err(ApiError::NotFound(
            "The resource could not be found.".into(),
        ));
    }
    app.authorize(
        &ctx,
        "os_compute_api:os-hypervisors:statistics",
        ctx.project_id(),
    )?;
    let nodes = load(&app).await?;
    let sum =
        |f: &dyn Fn(&HypervisorRecord) -> i64| -> i64 { nodes.iter().map(|n| f(&n.rec)).sum() };
    Ok(Json(json!({"hypervisor_statistics": {
        "count": nodes.len(),
        "vcpus": sum(&|r| r.vcpus),
        "memory_mb": sum(&|r| r.memory_mb),
        "local_gb": sum(&|r| r.local_gb),
        "vcpus_used": sum(&|r| r.vcpus_used),
        "memory_mb_used": sum(&|r| r.memory_mb_used),
        "local_gb_used": sum(&|r| r.local_gb_used),
        "free_ram_mb": sum(&|r| r.free_ram_mb.unwrap_or(r.memory_mb - r.memory_mb_used)),
        "free_disk_gb": sum(&|r| r.free_disk_gb.unwrap_or(r.local_gb - r.local_gb_used)),
        "current_workload": sum(&|r| r.current_workload.unwrap_or(0)),
        "running_vms": sum(&|r| r.running_vms.unwrap_or(0)),
        "disk_available_least": sum(&|r| r.disk_available_least.unwrap_or(0)),
    }})))
}
