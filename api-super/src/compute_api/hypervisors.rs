//! `/os-hypervisors`: the compute nodes of every cell, merged (cell order,
//! then id). List and detail (`hypervisor_hostname_pattern` and
//! `with_servers` from 2.53, `limit`/`marker` from 2.33, UUID ids from 2.53,
//! the resource fields dropped at 2.88), show (`with_servers`), the
//! pre-2.53 `/{hostname}/search` and `/{hostname}/servers`, and
//! `/statistics` below 2.88, `/{id}/uptime` below 2.88 (from 2.88 the
//! detail view's `uptime`). Admin only.
//!
//! Below 2.53 the ids (the node's and its service's) are region-wide
//! integers from the API database ([`legacy_ids`](super::legacy_ids)): a
//! cell's own ids repeat from cell to cell, so `GET /os-hypervisors/1`
//! names one node however many cells there are.

use axum::extract::{Path, RawQuery, State};
use axum::{Extension, Json};
use std::collections::HashMap;

use cell_mapping::db::{HypervisorRecord, LegacyKind};
use cell_mapping::CellMapping;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::legacy_ids;
use super::query_schema;
use super::servers::parse_query;
use super::services::{each_cell, is_up};
use super::{App, Ctx};
use crate::services::host_uptime::{self, NoUptime};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// A node with, when asked for, its instances.
struct Node {
    cell: CellMapping,
    rec: HypervisorRecord,
    servers: Option<Vec<(String, String)>>,
}

/// The ids a view answers: below 2.53 the region-wide integers of nodes
/// and services by UUID; empty from 2.53 (the UUIDs are the ids).
#[derive(Default)]
struct Ids {
    nodes: HashMap<String, i64>,
    services: HashMap<String, i64>,
    /// From 2.88: the uptime of each host whose compute reported one.
    uptimes: HashMap<String, String>,
}

impl Ids {
    async fn of(app: &App, ctx: &Ctx, nodes: &[Node]) -> ApiResult<Ids> {
        Ok(Ids {
            nodes: legacy_ids::for_uuids(
                app,
                ctx,
                LegacyKind::ComputeNode,
                nodes.iter().map(|n| n.rec.uuid.as_str()),
            )
            .await?,
            services: legacy_ids::for_uuids(
                app,
                ctx,
                LegacyKind::Service,
                nodes.iter().filter_map(|n| n.rec.service_uuid.as_deref()),
            )
            .await?,
            uptimes: HashMap::new(),
        })
    }

    /// Asks the computes of `nodes` that are up for their uptime (2.88's
    /// detail view; Nova asks each too, and a host that cannot say shows
    /// `null`).
    async fn with_uptimes(mut self, app: &App, ctx: &Ctx, nodes: &[Node]) -> Ids {
        if ctx.mv.at_least(88) {
            let mut hosts: Vec<(CellMapping, String)> = nodes
                .iter()
                .filter(|n| up(app, &n.rec))
                .map(|n| (n.cell.clone(), n.rec.host.clone()))
                .collect();
            hosts.sort_by(|a, b| a.1.cmp(&b.1));
            hosts.dedup_by(|a, b| a.1 == b.1);
            self.uptimes = host_uptime::uptimes(app, ctx, hosts).await;
        }
        self
    }
}

/// Every live compute node of every reachable cell, cell by cell.
async fn load(app: &App) -> ApiResult<Vec<Node>> {
    let per_cell = each_cell(app, |db| async move { db.hypervisors().await }).await?;
    Ok(per_cell
        .into_iter()
        .flat_map(|(cell, v)| {
            v.into_iter().map(move |rec| Node {
                cell: cell.clone(),
                rec,
                servers: None,
            })
        })
        .collect())
}

fn up(app: &App, r: &HypervisorRecord) -> bool {
    is_up(
        app,
        r.service_forced_down.unwrap_or(false),
        r.service_last_seen_up,
    )
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

fn api_id(ctx: &Ctx, ids: &Ids, n: &HypervisorRecord) -> Value {
    if ctx.mv.at_least(53) {
        json!(n.uuid)
    } else {
        json!(ids.nodes.get(&n.uuid))
    }
}

/// The brief view; `with_servers` (2.53) asked for the servers, which
/// from 2.75 are listed even when there are none.
fn brief(app: &App, ctx: &Ctx, ids: &Ids, n: &Node, with_servers: bool) -> Value {
    let r = &n.rec;
    let mut v = json!({
        "id": api_id(ctx, ids, r),
        "hypervisor_hostname": r.hypervisor_hostname,
        "state": if up(app, r) { "up" } else { "down" },
        "status": if r.service_disabled.unwrap_or(false) { "disabled" } else { "enabled" },
    });
    match &n.servers {
        Some(s) if !s.is_empty() => {
            v["servers"] = s
                .iter()
                .map(|(uuid, name)| json!({"uuid": uuid, "name": name}))
                .collect();
        }
        _ if with_servers && ctx.mv.at_least(75) => v["servers"] = json!([]),
        _ => {}
    }
    v
}

fn detail(app: &App, ctx: &Ctx, ids: &Ids, n: &Node, with_servers: bool) -> Value {
    let r = &n.rec;
    let mut v = brief(app, ctx, ids, n, with_servers);
    v["hypervisor_type"] = json!(r.hypervisor_type);
    v["hypervisor_version"] = json!(r.hypervisor_version);
    v["host_ip"] = json!(r.host_ip);
    let service_id = match (&r.service_uuid, ctx.mv.at_least(53)) {
        (Some(u), true) => json!(u),
        (Some(u), false) => json!(ids.services.get(u)),
        (None, _) => Value::Null,
    };
    v["service"] = json!({
        "host": r.host,
        "id": service_id,
        "disabled_reason": r.service_disabled_reason,
    });
    if ctx.mv.at_least(88) {
        v["uptime"] = json!(ids.uptimes.get(&r.host));
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
    let ids = Ids::of(app, ctx, &nodes).await?;
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
            .position(|n| api_id(ctx, &ids, &n.rec).to_string().trim_matches('"') == m)
            .ok_or_else(|| bad(format!("marker [{m}] not found")))?;
        nodes.drain(..=pos);
    }
    let more = paging && q.contains_key("limit") && nodes.len() > limit;
    nodes.truncate(limit);
    if servers {
        with_servers(app, &mut nodes).await?;
    }
    let ids = if is_detail {
        ids.with_uptimes(app, ctx, &nodes).await
    } else {
        ids
    };
    let items: Vec<Value> = nodes
        .iter()
        .map(|n| {
            if is_detail {
                detail(app, ctx, &ids, n, servers)
            } else {
                brief(app, ctx, &ids, n, servers)
            }
        })
        .collect();
    let mut body = json!({ "hypervisors": items });
    if more {
        if let Some(last) = nodes.last() {
            let id = api_id(ctx, &ids, &last.rec).to_string();
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
    let q = parse_query(raw.as_deref());
    let servers = truthy(ctx.mv.at_least(53), &q, "with_servers")?;
    let mut found = one(&app, &ctx, &id).await?;
    if servers {
        with_servers(&app, std::slice::from_mut(&mut found)).await?;
    }
    let nodes = std::slice::from_ref(&found);
    let ids = Ids::of(&app, &ctx, nodes)
        .await?
        .with_uptimes(&app, &ctx, nodes)
        .await;
    Ok(Json(
        json!({ "hypervisor": detail(&app, &ctx, &ids, &found, servers) }),
    ))
}

/// The node `id` names: a UUID from 2.53 (else 400), a region-wide
/// integer before (else 404), as Nova's `_validate_id`.
async fn one(app: &App, ctx: &Ctx, id: &str) -> ApiResult<Node> {
    let not_found = || ApiError::NotFound(format!("Hypervisor with ID '{id}' could not be found."));
    let uuid = if ctx.mv.at_least(53) {
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(bad(format!("Invalid uuid {id}")));
        }
        id.to_owned()
    } else {
        let Ok(n) = id.parse::<i64>() else {
            return Err(not_found());
        };
        legacy_ids::uuid_of(app, LegacyKind::ComputeNode, n)
            .await?
            .ok_or_else(not_found)?
    };
    load(app)
        .await?
        .into_iter()
        .find(|n| n.rec.uuid == uuid)
        .ok_or_else(not_found)
}

/// `GET /os-hypervisors/{id}/uptime` (before 2.88): the brief view with
/// what the node's compute reports as its uptime. A host that is down is
/// 400 with Nova's words; a driver that reports none (the fake driver,
/// as Nova's) 501.
pub async fn uptime(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    if ctx.mv.at_least(88) {
        return Err(ApiError::NotFound(
            "The resource could not be found.".into(),
        ));
    }
    app.authorize(
        &ctx,
        "os_compute_api:os-hypervisors:uptime",
        ctx.project_id(),
    )?;
    let node = one(&app, &ctx, &id).await?;
    if !up(&app, &node.rec) {
        return Err(bad(format!(
            "Compute service of {} is unavailable at this time.",
            node.rec.host
        )));
    }
    let uptime = match host_uptime::uptime(&app, &ctx, &node.cell, &node.rec.host).await {
        Ok(u) => u,
        Err(NoUptime::NotReported) => {
            return Err(ApiError::NotImplemented(
                "The requested functionality is not supported.".into(),
            ))
        }
        Err(NoUptime::Failed(e)) => return Err(e),
    };
    let ids = Ids::of(&app, &ctx, std::slice::from_ref(&node)).await?;
    let mut v = brief(&app, &ctx, &ids, &node, false);
    v["uptime"] = json!(uptime);
    Ok(Json(json!({ "hypervisor": v })))
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
    let ids = Ids::of(app, ctx, &nodes).await?;
    let items: Vec<Value> = nodes
        .iter()
        .map(|n| brief(app, ctx, &ids, n, false))
        .collect();
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
