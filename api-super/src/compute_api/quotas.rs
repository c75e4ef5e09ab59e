//! Quotas: `/os-quota-sets/{project_id}` (show, update, delete, `defaults`,
//! `detail`, each but `defaults` also per user with `?user_id=`) and
//! `/limits`. Limits, as Nova's: the configured defaults ([`QuotaConfig`],
//! Nova's defaults) overridden by the `default` quota class
//! (`os-quota-class-sets`, [`super::quota_classes`]), those by the
//! project's own (the API database's `quotas`), and for a user those by
//! the user's (`project_user_quotas`). Usage is counted, never stored:
//! instances, cores and RAM from the API database's instance mappings (so
//! a cell that is down cannot hide them), of the project or of one user
//! in it; server groups of the project or the user. Server create checks
//! instances/cores/RAM (the user's own limits too, when set) and, booting
//! into a server group, the user's server_group_members, in the same
//! transaction that writes its build requests, under a per-project lock
//! (see `ComputeDb::create_builds`); server group create checks
//! server_groups the same way. As in Nova, `key_pairs` and
//! `server_group_members` are per-user (per-group) resources that
//! `detail` shows in use 0.
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

use super::db::{InstanceLimits, UserLimits};
use super::error::{ApiError, ApiResult};
use super::{body_schema, query_schema};
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

/// Every known resource's default: the configured defaults overridden by
/// the `default` quota class's limits (Nova: a default set through
/// `os-quota-class-sets` takes precedence over the configuration).
fn defaults_with(app: &App, class: Vec<(String, i64)>) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = CORE
        .iter()
        .copied()
        .chain(INJECTED.iter().chain(NETWORK).map(|(n, _)| *n))
        .filter_map(|n| Some((n.to_owned(), app.quota.get(n)?)))
        .collect();
    overlay(&mut out, class);
    out
}

/// `overrides` over the known resources of `base`.
fn overlay(base: &mut BTreeMap<String, i64>, overrides: Vec<(String, i64)>) {
    for (r, l) in overrides {
        if let Some(v) = base.get_mut(&r) {
            *v = l;
        }
    }
}

/// The defaults every project starts from (see [`defaults_with`]).
pub async fn default_limits(app: &App) -> ApiResult<BTreeMap<String, i64>> {
    Ok(defaults_with(app, app.db.quota_class(DEFAULT_CLASS).await?))
}

/// A quota class's limits, every known resource: its own over the
/// defaults (Nova's `get_class_quotas`).
pub async fn class_limits(app: &App, class: &str) -> ApiResult<BTreeMap<String, i64>> {
    let mut l = default_limits(app).await?;
    if class != DEFAULT_CLASS {
        overlay(&mut l, app.db.quota_class(class).await?);
    }
    Ok(l)
}

/// The quota class whose limits are the defaults.
pub const DEFAULT_CLASS: &str = "default";

/// A project's limits, every known resource: its overrides over the
/// defaults.
pub async fn project_limits(app: &App, project: &str) -> ApiResult<BTreeMap<String, i64>> {
    let mut l = default_limits(app).await?;
    overlay(&mut l, app.db.quotas(project).await?);
    Ok(l)
}

/// A user's limits in a project: the user's own over the project's (Nova's
/// `get_user_quotas`).
pub async fn user_limits(app: &App, project: &str, user: &str) -> ApiResult<BTreeMap<String, i64>> {
    let mut l = project_limits(app, project).await?;
    overlay(&mut l, app.db.user_quotas(project, user).await?);
    Ok(l)
}

/// One limit of a project.
pub async fn limit(app: &App, project: &str, resource: &str) -> ApiResult<i64> {
    Ok(project_limits(app, project)
        .await?
        .get(resource)
        .copied()
        .unwrap_or(-1))
}

/// One limit of a user in a project (the project's unless the user has
/// one set).
pub async fn user_limit(app: &App, project: &str, user: &str, resource: &str) -> ApiResult<i64> {
    Ok(user_limits(app, project, user)
        .await?
        .get(resource)
        .copied()
        .unwrap_or(-1))
}

/// The quota rows a server create read with its flavor
/// (`ComputeDb::flavor_for_create`).
#[derive(Debug, Clone, Default)]
pub struct QuotaReads {
    /// The project's own limits.
    pub project: Vec<(String, i64)>,
    /// The `default` class's limits.
    pub class_defaults: Vec<(String, i64)>,
    /// The per-user limits set in the project (user, resource, limit).
    pub users: Vec<(String, String, i64)>,
}

/// What a server create of `user` is checked against, from what it read
/// with the flavor (the project's overrides, the `default` class, the
/// project's per-user limits): the instance limits (the user's own beside
/// the project's when the user has one of them set, as Nova checks both),
/// `metadata_items` (checked here: Nova's 403 when the server's metadata
/// has more items) and the user's `server_group_members`.
pub fn create_limits(
    app: &App,
    reads: &QuotaReads,
    user: &str,
    metadata_items: usize,
) -> ApiResult<(InstanceLimits, i64)> {
    let mut l = defaults_with(app, reads.class_defaults.clone());
    overlay(&mut l, reads.project.clone());
    let own: Vec<(String, i64)> = reads
        .users
        .iter()
        .filter(|(u, _, _)| u == user)
        .map(|(_, r, v)| (r.clone(), *v))
        .collect();
    let mut ul = l.clone();
    overlay(&mut ul, own.clone());
    let g = |m: &BTreeMap<String, i64>, r: &str| m.get(r).copied().unwrap_or(-1);
    let items = g(&ul, "metadata_items");
    if items >= 0 && metadata_items as i64 > items {
        // Nova's MetadataLimitExceeded (nova.compute.api's
        // `_check_metadata_properties_quota`).
        return Err(ApiError::Forbidden(format!(
            "Maximum number of metadata items exceeds {items}"
        )));
    }
    let per_user = own
        .iter()
        .any(|(r, _)| matches!(r.as_str(), "instances" | "cores" | "ram"));
    Ok((
        InstanceLimits {
            instances: g(&l, "instances"),
            cores: g(&l, "cores"),
            ram: g(&l, "ram"),
            user: per_user.then(|| UserLimits {
                instances: g(&ul, "instances"),
                cores: g(&ul, "cores"),
                ram: g(&ul, "ram"),
            }),
        },
        g(&ul, "server_group_members"),
    ))
}

/// Usage by resource, as Nova's `_get_usages` counts it: instances,
/// cores, RAM and server groups of the project, or of `user` in it;
/// `key_pairs` and `server_group_members` are per-user (per-group)
/// resources Nova never counts here: 0.
async fn usage(
    app: &App,
    project: &str,
    user: Option<&str>,
) -> ApiResult<HashMap<&'static str, i64>> {
    let ((instances, cores, ram), groups) = match user {
        Some(u) => (
            app.db.user_instance_usage(project, u).await?,
            app.db.user_server_group_count(project, u).await?,
        ),
        None => (
            app.db.instance_usage(project).await?,
            app.db.api().server_group_count(project).await?,
        ),
    };
    Ok(HashMap::from([
        ("instances", instances),
        ("cores", cores),
        ("ram", ram),
        ("server_groups", groups),
    ]))
}

/// The `user_id` query parameter (Nova: the first given; empty: none).
fn user_of(q: &[(String, String)]) -> Option<&str> {
    q.iter()
        .find(|(k, _)| k == "user_id")
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

fn view(ctx: &Ctx, limits: &BTreeMap<String, i64>) -> Map<String, Value> {
    resources(ctx)
        .into_iter()
        .map(|r| (r.to_owned(), json!(limits.get(r).copied().unwrap_or(-1))))
        .collect()
}

/// `GET /os-quota-sets/{project_id}[?user_id=]`: the project's limits, or
/// the user's (the user's own over the project's).
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::QUOTA_SET.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-quota-sets:show", &project)?;
    let limits = match user_of(&q) {
        Some(u) => user_limits(&app, &project, u).await?,
        None => project_limits(&app, &project).await?,
    };
    let mut v = view(&ctx, &limits);
    v.insert("id".into(), json!(project));
    Ok(Json(json!({ "quota_set": v })))
}

/// `GET /os-quota-sets/{project_id}/detail[?user_id=]`: limits with what
/// is in use (the user's, with `user_id`).
pub async fn detail(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::QUOTA_SET.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-quota-sets:detail", &project)?;
    let user = user_of(&q);
    let limits = match user {
        Some(u) => user_limits(&app, &project, u).await?,
        None => project_limits(&app, &project).await?,
    };
    let used = usage(&app, &project, user).await?;
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

/// `GET /os-quota-sets/{project_id}/defaults`: the configured defaults
/// overridden by the `default` quota class.
pub async fn defaults(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
) -> ApiResult<Json<Value>> {
    app.authorize(&ctx, "os_compute_api:os-quota-sets:defaults", &project)?;
    let mut v = view(&ctx, &default_limits(&app).await?);
    v.insert("id".into(), json!(project));
    Ok(Json(json!({ "quota_set": v })))
}

/// A quota value as Nova's schema takes it (`common_quota`: an integer,
/// or a string of digits, from -1 to the database's largest integer).
pub(crate) fn quota_value(key: &str, v: &Value) -> ApiResult<i64> {
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

/// Nova's unlimited test (`_is_unlimited_value`: -1 or less).
fn unlimited(v: i64) -> bool {
    v <= -1
}

/// Nova's `_validate_quota_limit`: -1 is infinite on both sides.
fn validate_limit(resource: &str, limit: i64, minimum: i64, maximum: i64) -> ApiResult<()> {
    let inf = |v: i64| if v == -1 { f64::INFINITY } else { v as f64 };
    if inf(limit) < inf(minimum) {
        return Err(ApiError::BadRequest(format!(
            "Quota limit {limit} for {resource} must be greater than or equal to already used and reserved {minimum}."
        )));
    }
    if inf(limit) > inf(maximum) {
        return Err(ApiError::BadRequest(format!(
            "Quota limit {limit} for {resource} must be less than or equal to {maximum}."
        )));
    }
    Ok(())
}

/// Nova's `get_settable_quotas`: the (minimum, maximum) each resource may
/// be set to. A project's: at least what is in use and the sum of the
/// per-user limits set in it, no maximum. A user's: at least what the
/// user uses, at most what the project has left to give out (its limit
/// less every user's limit, computed as Nova does) plus the user's own.
async fn settable(
    app: &App,
    project: &str,
    user: Option<&str>,
) -> ApiResult<HashMap<String, (i64, i64)>> {
    let limits = project_limits(app, project).await?;
    let mut remains = limits.clone();
    for (r, l) in app.db.user_quotas_of_project(project).await? {
        if let Some(v) = remains.get_mut(&r) {
            *v -= l;
        }
    }
    let mut out = HashMap::new();
    match user {
        Some(u) => {
            let own: HashMap<String, i64> =
                app.db.user_quotas(project, u).await?.into_iter().collect();
            let used = usage(app, project, Some(u)).await?;
            for (r, rem) in &remains {
                let mine = own.get(r).copied().unwrap_or(0);
                let maximum = if unlimited(*rem) || unlimited(mine) {
                    -1
                } else {
                    rem + mine
                };
                let minimum = used.get(r.as_str()).copied().unwrap_or(0);
                out.insert(r.clone(), (minimum, maximum));
            }
        }
        None => {
            let used = usage(app, project, None).await?;
            for (r, limit) in &limits {
                let rem = remains.get(r).copied().unwrap_or(*limit);
                let given = if unlimited(*limit) || unlimited(rem) {
                    -1
                } else {
                    limit - rem
                };
                let minimum = given.max(used.get(r.as_str()).copied().unwrap_or(0));
                out.insert(r.clone(), (minimum, -1));
            }
        }
    }
    Ok(out)
}

/// The `{"quota_set": {...}}` of an update, checked as Nova's schema for
/// the microversion: `(changes, force)`.
fn update_body(ctx: &Ctx, body: &[u8]) -> ApiResult<(Vec<(String, i64)>, bool)> {
    let v = body_schema::parse(body)?;
    let mut allowed = resources(ctx);
    allowed.push("force");
    if !ctx.mv.at_least(36) {
        allowed.push("networks");
    }
    let (changes, force, networks) = body_schema::member(&v, "quota_set", &allowed, &[], |set| {
        let mut force = false;
        let mut networks = false;
        let mut changes = Vec::new();
        for (k, val) in set {
            if k == "force" {
                force = match val {
                    Value::Bool(b) => *b,
                    Value::String(s) => matches!(
                        s.to_ascii_lowercase().as_str(),
                        "1" | "t" | "true" | "on" | "y" | "yes"
                    ),
                    other => {
                        return Err(ApiError::BadRequest(format!(
                            "Invalid input for field/attribute force. Value: {other}. {other} is not of type 'boolean', 'string'"
                        )))
                    }
                };
                continue;
            }
            // Only the schema's properties are checked here; any other
            // key is the `additionalProperties` 400 that follows.
            if !allowed.contains(&k.as_str()) {
                continue;
            }
            let n = quota_value(k, val)?;
            if k == "networks" {
                networks = true;
            } else {
                changes.push((k.clone(), n));
            }
        }
        Ok((changes, force, networks))
    })?;
    if networks {
        return Err(ApiError::BadRequest(
            "The networks quota has been removed".into(),
        ));
    }
    Ok((changes, force))
}

/// `PUT /os-quota-sets/{project_id}[?user_id=]` (admin): `{"quota_set":
/// {..., "force": bool}}`. Without `force`, each limit is checked against
/// Nova's settable range (see [`settable`]): 400 with Nova's words.
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
    RawQuery(raw): RawQuery,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    query_schema::QUOTA_SET.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-quota-sets:update", &project)?;
    let user = user_of(&q);
    let (changes, force) = update_body(&ctx, &body)?;
    // The rows' columns hold 255 characters (Nova's too): a longer id is
    // the caller's mistake, not the database's.
    for (name, id) in [("project_id", Some(project.as_str())), ("user_id", user)] {
        if id.is_some_and(|i| i.chars().count() > 255) {
            return Err(ApiError::BadRequest(format!(
                "{name} has more than 255 characters."
            )));
        }
    }
    if !force {
        let range = settable(&app, &project, user).await?;
        for (r, l) in &changes {
            let (minimum, maximum) = range.get(r).copied().unwrap_or((0, -1));
            validate_limit(r, *l, minimum, maximum)?;
        }
    }
    let limits = match user {
        Some(u) => {
            app.db.user_quotas_set(&project, u, &changes).await?;
            user_limits(&app, &project, u).await?
        }
        None => {
            app.db.quotas_set(&project, &changes).await?;
            project_limits(&app, &project).await?
        }
    };
    Ok(Json(json!({ "quota_set": view(&ctx, &limits) })))
}

/// `DELETE /os-quota-sets/{project_id}[?user_id=]` (admin): the project
/// back to the defaults (its users' limits too), or the user back to the
/// project's limits.
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    query_schema::QUOTA_SET.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-quota-sets:delete", &project)?;
    match user_of(&q) {
        Some(u) => app.db.user_quotas_delete(&project, u).await?,
        None => app.db.quotas_delete(&project).await?,
    }
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
    let used = usage(&app, &project, None).await?;
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
