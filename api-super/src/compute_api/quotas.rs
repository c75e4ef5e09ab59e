//! Quotas: `/os-quota-sets/{project_id}` (show, update, delete, `defaults`,
//! `detail`) and `/limits`. Limits are the configured defaults
//! ([`QuotaConfig`], Nova's defaults) overridden per project in the API
//! database's `quotas` table. Usage is counted, never stored: instances,
//! cores and RAM from the API database's instance mappings (so a cell that
//! is down cannot hide them), key pairs per user, server groups per
//! project. Server create checks instances/cores/RAM (and, booting into
//! a server group, server_group_members) in the same transaction that
//! writes its build requests, under a per-project lock (see
//! `ComputeDb::create_builds`); server group create checks server_groups
//! the same way. As in Nova, `server_group_members` is counted per group
//! (the booting user's members) and is no project usage: `detail` shows
//! it in use 0.
//!
//! Resource names at 2.57+: instances, cores, ram, key_pairs,
//! metadata_items, server_groups, server_group_members; below 2.57 also
//! injected_files, injected_file_content_bytes, injected_file_path_bytes;
//! below 2.36 also the network proxies (fixed_ips, floating_ips,
//! security_groups, security_group_rules), shown with Nova's defaults and
//! never enforced here.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::db::InstanceLimits;
use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::{App, Ctx};

/// `[compute.quota]`: the default limits (-1: unlimited).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaConfig {
    /// Servers per project.
    pub instances: i64,
    /// VCPUs per project.
    pub cores: i64,
    /// RAM (MB) per project.
    pub ram: i64,
    /// Key pairs per user.
    pub key_pairs: i64,
    /// Metadata items per server.
    pub metadata_items: i64,
    /// Server groups per project.
    pub server_groups: i64,
    /// Servers per server group.
    pub server_group_members: i64,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        Self {
            instances: 10,
            cores: 20,
            ram: 51200,
            key_pairs: 100,
            metadata_items: 128,
            server_groups: 10,
            server_group_members: 10,
        }
    }
}

/// The resources enforced here.
const CORE: &[&str] = &[
    "instances",
    "cores",
    "ram",
    "key_pairs",
    "metadata_items",
    "server_groups",
    "server_group_members",
];
/// Below 2.57 (personality files), with Nova's defaults.
const INJECTED: &[(&str, i64)] = &[
    ("injected_files", 5),
    ("injected_file_content_bytes", 10240),
    ("injected_file_path_bytes", 255),
];
/// Below 2.36 (network proxies), with Nova's defaults.
const NETWORK: &[(&str, i64)] = &[
    ("fixed_ips", -1),
    ("floating_ips", 10),
    ("security_groups", 10),
    ("security_group_rules", 20),
];

impl QuotaConfig {
    fn get(&self, resource: &str) -> Option<i64> {
        Some(match resource {
            "instances" => self.instances,
            "cores" => self.cores,
            "ram" => self.ram,
            "key_pairs" => self.key_pairs,
            "metadata_items" => self.metadata_items,
            "server_groups" => self.server_groups,
            "server_group_members" => self.server_group_members,
            other => INJECTED.iter().chain(NETWORK).find(|(n, _)| *n == other)?.1,
        })
    }
}

/// The resource names of the quota set at the request's microversion.
fn resources(ctx: &Ctx) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = CORE.to_vec();
    if !ctx.mv.at_least(57) {
        v.extend(INJECTED.iter().map(|(n, _)| *n));
    }
    if !ctx.mv.at_least(36) {
        v.extend(NETWORK.iter().map(|(n, _)| *n));
    }
    v
}

/// A project's limits, every known resource: overrides over defaults.
pub async fn project_limits(app: &App, project: &str) -> ApiResult<BTreeMap<String, i64>> {
    Ok(limits_with(app, app.db.quotas(project).await?))
}

/// Every known resource's limit: the project's `overrides` over the
/// defaults.
fn limits_with(app: &App, overrides: Vec<(String, i64)>) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = CORE
        .iter()
        .copied()
        .chain(INJECTED.iter().chain(NETWORK).map(|(n, _)| *n))
        .filter_map(|n| Some((n.to_owned(), app.quota.get(n)?)))
        .collect();
    for (r, l) in overrides {
        if out.contains_key(&r) {
            out.insert(r, l);
        }
    }
    out
}

/// One limit of a project.
pub async fn limit(app: &App, project: &str, resource: &str) -> ApiResult<i64> {
    Ok(project_limits(app, project)
        .await?
        .get(resource)
        .copied()
        .unwrap_or(-1))
}

/// What a server create is checked against, from the project's quota
/// `overrides` (read with the flavor): the instance limits,
/// `metadata_items` (checked here: Nova's 403 when the server's metadata
/// has more items) and `server_group_members`.
pub fn create_limits(
    app: &App,
    overrides: Vec<(String, i64)>,
    metadata_items: usize,
) -> ApiResult<(InstanceLimits, i64)> {
    let l = limits_with(app, overrides);
    let g = |r: &str| l.get(r).copied().unwrap_or(-1);
    let items = g("metadata_items");
    if items >= 0 && metadata_items as i64 > items {
        // Nova's MetadataLimitExceeded (nova.compute.api's
        // `_check_metadata_properties_quota`).
        return Err(ApiError::Forbidden(format!(
            "Maximum number of metadata items exceeds {items}"
        )));
    }
    Ok((
        InstanceLimits {
            instances: g("instances"),
            cores: g("cores"),
            ram: g("ram"),
        },
        g("server_group_members"),
    ))
}

/// Usage of a project by resource (`key_pairs` of `user`).
async fn usage(
    app: &App,
    project: &str,
    user: Option<&str>,
) -> ApiResult<HashMap<&'static str, i64>> {
    let (instances, cores, ram) = app.db.instance_usage(project).await?;
    let groups = app.db.api().server_group_count(project).await?;
    let key_pairs = match user {
        Some(u) => app.db.keypair_count(u).await?,
        None => 0,
    };
    Ok(HashMap::from([
        ("instances", instances),
        ("cores", cores),
        ("ram", ram),
        ("server_groups", groups),
        ("key_pairs", key_pairs),
    ]))
}

fn reject_user_quotas(q: &HashMap<String, String>) -> ApiResult<()> {
    if q.contains_key("user_id") {
        return Err(ApiError::BadRequest(
            "Per-user quotas (user_id) are not supported by this deployment.".into(),
        ));
    }
    Ok(())
}

fn view(ctx: &Ctx, limits: &BTreeMap<String, i64>) -> Map<String, Value> {
    resources(ctx)
        .into_iter()
        .map(|r| (r.to_owned(), json!(limits.get(r).copied().unwrap_or(-1))))
        .collect()
}

/// `GET /os-quota-sets/{project_id}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::QUOTA_SET.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-quota-sets:show", &project)?;
    reject_user_quotas(&q)?;
    let mut v = view(&ctx, &project_limits(&app, &project).await?);
    v.insert("id".into(), json!(project));
    Ok(Json(json!({ "quota_set": v })))
}

/// `GET /os-quota-sets/{project_id}/detail`.
pub async fn detail(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::QUOTA_SET.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-quota-sets:detail", &project)?;
    reject_user_quotas(&q)?;
    let limits = project_limits(&app, &project).await?;
    let own = (project == ctx.project_id()).then(|| ctx.user_id());
    let used = usage(&app, &project, own).await?;
    let mut v = Map::new();
    for r in resources(&ctx) {
        v.insert(
            r.to_owned(),
            json!({"limit": limits.get(r).copied().unwrap_or(-1),
                   "in_use": used.get(r).copied().unwrap_or(0), "reserved": 0}),
        );
    }
    v.insert("id".into(), json!(project));
    Ok(Json(json!({ "quota_set": v })))
}

/// `GET /os-quota-sets/{project_id}/defaults`.
pub async fn defaults(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
) -> ApiResult<Json<Value>> {
    app.authorize(&ctx, "os_compute_api:os-quota-sets:defaults", &project)?;
    let mut v: Map<String, Value> = resources(&ctx)
        .into_iter()
        .map(|r| (r.to_owned(), json!(app.quota.get(r).unwrap_or(-1))))
        .collect();
    v.insert("id".into(), json!(project));
    Ok(Json(json!({ "quota_set": v })))
}

fn quota_value(key: &str, v: &Value) -> ApiResult<i64> {
    let n = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if (-1..=i64::from(i32::MAX)).contains(&n) => Ok(n),
        Some(n) if n < -1 => Err(ApiError::BadRequest(format!(
            "Invalid input for field/attribute {key}. Value: {v}. {n} is less than the minimum of -1"
        ))),
        _ => Err(ApiError::BadRequest(format!(
            "Invalid input for field/attribute {key}. Value: {v}. {v} is not of type 'integer', 'string'"
        ))),
    }
}

/// `PUT /os-quota-sets/{project_id}` (admin): `{"quota_set": {...,
/// "force": bool}}`. Without `force`, a limit below what is in use is a 400.
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    query_schema::QUOTA_SET.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-quota-sets:update", &project)?;
    reject_user_quotas(&q)?;
    let v: Value = serde_json::from_slice(&body)
        .map_err(|_| ApiError::BadRequest("Malformed request body".into()))?;
    let Some(set) = v.get("quota_set").and_then(Value::as_object) else {
        return Err(ApiError::BadRequest(
            "Invalid input for field/attribute quota_set. Value: None. 'quota_set' is a required property"
                .into(),
        ));
    };
    let known = resources(&ctx);
    let mut force = false;
    let mut changes: Vec<(String, i64)> = Vec::new();
    for (k, val) in set {
        if k == "force" {
            force = match val {
                Value::Bool(b) => *b,
                Value::String(s) if s.eq_ignore_ascii_case("true") => true,
                Value::String(s) if s.eq_ignore_ascii_case("false") => false,
                other => {
                    return Err(ApiError::BadRequest(format!(
                        "Invalid input for field/attribute force. Value: {other}. {other} is not of type 'boolean', 'string'"
                    )))
                }
            };
            continue;
        }
        if !known.contains(&k.as_str()) {
            return Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute quota_set. Additional properties are not allowed ('{k}' was unexpected)"
            )));
        }
        changes.push((k.clone(), quota_value(k, val)?));
    }
    if !force {
        let used = usage(&app, &project, None).await?;
        for (r, l) in &changes {
            let u = used.get(r.as_str()).copied().unwrap_or(0);
            if *l >= 0 && *l < u {
                return Err(ApiError::BadRequest(format!(
                    "Quota limit {l} for {r} must be greater than or equal to already used and reserved {u}."
                )));
            }
        }
    }
    app.db.quotas_set(&project, &changes).await?;
    let limits = project_limits(&app, &project).await?;
    Ok(Json(json!({ "quota_set": view(&ctx, &limits) })))
}

/// `DELETE /os-quota-sets/{project_id}` (admin): back to the defaults.
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    query_schema::QUOTA_SET.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-quota-sets:delete", &project)?;
    reject_user_quotas(&q)?;
    app.db.quotas_delete(&project).await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `GET /limits` (`?tenant_id=` for admins): absolute limits and usage of
/// the project; `rate` is always empty.
pub async fn limits(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::LIMITS.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:limits", ctx.project_id())?;
    let project = match q.get("tenant_id") {
        Some(t) if t != ctx.project_id() => {
            app.authorize(&ctx, "os_compute_api:limits:other_project", t)?;
            t.clone()
        }
        _ => ctx.project_id().to_owned(),
    };
    let l = project_limits(&app, &project).await?;
    let own = (project == ctx.project_id()).then(|| ctx.user_id());
    let used = usage(&app, &project, own).await?;
    let g = |r: &str| l.get(r).copied().unwrap_or(-1);
    let u = |r: &str| used.get(r).copied().unwrap_or(0);
    let mut abs = json!({
        "maxServerMeta": g("metadata_items"),
        "maxTotalCores": g("cores"),
        "maxTotalInstances": g("instances"),
        "maxTotalKeypairs": g("key_pairs"),
        "maxTotalRAMSize": g("ram"),
        "maxServerGroups": g("server_groups"),
        "maxServerGroupMembers": g("server_group_members"),
        "totalCoresUsed": u("cores"),
        "totalInstancesUsed": u("instances"),
        "totalRAMUsed": u("ram"),
        "totalServerGroupsUsed": u("server_groups"),
    });
    if !ctx.mv.at_least(39) {
        abs["maxImageMeta"] = json!(g("metadata_items"));
    }
    if !ctx.mv.at_least(57) {
        abs["maxPersonality"] = json!(g("injected_files"));
        abs["maxPersonalitySize"] = json!(g("injected_file_content_bytes"));
    }
    if !ctx.mv.at_least(36) {
        abs["maxSecurityGroups"] = json!(g("security_groups"));
        abs["maxSecurityGroupRules"] = json!(g("security_group_rules"));
        abs["maxTotalFloatingIps"] = json!(g("floating_ips"));
        abs["totalSecurityGroupsUsed"] = json!(0);
        abs["totalFloatingIpsUsed"] = json!(0);
    }
    Ok(Json(json!({"limits": {"absolute": abs, "rate": []}})))
}
