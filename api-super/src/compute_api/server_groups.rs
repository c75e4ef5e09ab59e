//! `/os-server-groups`: list (a project's; every project's with
//! `all_projects` for admins; `limit`/`offset`), create (`policies` list
//! before 2.64; `policy` and `rules` (`max_server_per_host`, anti-affinity
//! only) from 2.64; the soft policies from 2.15), show, delete. Servers
//! join a group at create time (`os:scheduler_hints: {"group": uuid}`, see
//! [`super::servers`]) and the scheduler honours its policy. Another
//! project's group is 404 for a non-admin, as a server is.
//!
//! Quotas as Nova's: create is refused with 403 "Quota exceeded, too many
//! server groups." when the project has `server_groups` groups already;
//! a boot into a group with 403 "Quota exceeded, too many servers in
//! group" when the booting user's live members of the group plus the new
//! servers would exceed `server_group_members` (see
//! `ComputeDb::create_builds`).

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cell_mapping::db::{NewServerGroup, ServerGroup};
use serde_json::{json, Map, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::servers::parse_query;
use super::{App, Ctx};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("Instance group {id} could not be found."))
}

fn view(ctx: &Ctx, g: &ServerGroup) -> Value {
    let mut v = json!({
        "id": g.uuid,
        "name": g.name,
        "members": g.members,
    });
    if ctx.mv.at_least(64) {
        v["policy"] = json!(g.policy);
        v["rules"] = g
            .rules
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_else(|| json!({}));
    } else {
        v["policies"] = json!([g.policy]);
        v["metadata"] = json!({});
    }
    if ctx.mv.at_least(13) {
        v["project_id"] = json!(g.project_id);
        v["user_id"] = json!(g.user_id);
    }
    v
}

/// The group `id` if the caller may do `action` on it: another project's
/// group is 404 for a non-admin (its existence is not disclosed).
pub(crate) async fn visible(
    app: &App,
    ctx: &Ctx,
    id: &str,
    action: &str,
) -> ApiResult<ServerGroup> {
    let g = app
        .db()
        .api()
        .server_group(id)
        .await?
        .ok_or_else(|| not_found(id))?;
    match app.authorize(ctx, action, &g.project_id) {
        Ok(()) => Ok(g),
        Err(_) if !ctx.is_admin() && g.project_id != ctx.project_id() => Err(not_found(id)),
        Err(e) => Err(e),
    }
}

fn non_negative(
    q: &std::collections::HashMap<String, String>,
    key: &str,
) -> ApiResult<Option<usize>> {
    match q.get(key) {
        None => Ok(None),
        Some(s) => s.parse::<usize>().map(Some).map_err(|_| {
            bad(format!(
                "Invalid input for query parameters {key}. Value: {s}. '{s}' does not match '^[0-9]*$'"
            ))
        }),
    }
}

/// `GET /os-server-groups`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::SERVER_GROUP_LIST.check(ctx.mv, raw.as_deref())?;
    app.authorize(
        &ctx,
        "os_compute_api:os-server-groups:index",
        ctx.project_id(),
    )?;
    let q = parse_query(raw.as_deref());
    let all = if q.contains_key("all_projects") {
        app.authorize(
            &ctx,
            "os_compute_api:os-server-groups:index:all_projects",
            ctx.project_id(),
        )?;
        true
    } else {
        false
    };
    let limit = non_negative(&q, "limit")?
        .unwrap_or(app.max_limit)
        .min(app.max_limit);
    let offset = non_negative(&q, "offset")?.unwrap_or(0);
    let groups = app
        .db()
        .api()
        .server_groups((!all).then(|| ctx.project_id()))
        .await?;
    let items: Vec<Value> = groups
        .iter()
        .skip(offset)
        .take(limit)
        .map(|g| view(&ctx, g))
        .collect();
    Ok(Json(json!({ "server_groups": items })))
}

const POLICIES: [&str; 4] = [
    "affinity",
    "anti-affinity",
    "soft-affinity",
    "soft-anti-affinity",
];

fn policy_ok(ctx: &Ctx, p: &str) -> bool {
    match p {
        "affinity" | "anti-affinity" => true,
        "soft-affinity" | "soft-anti-affinity" => ctx.mv.at_least(15),
        _ => false,
    }
}

fn parse_create(ctx: &Ctx, o: &Map<String, Value>) -> ApiResult<(String, String, Option<String>)> {
    let allowed: &[&str] = if ctx.mv.at_least(64) {
        &["name", "policy", "rules"]
    } else {
        &["name", "policies"]
    };
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let name = match o.get("name") {
        Some(Value::String(s))
            if !s.trim().is_empty() && s.trim() == s && s.chars().count() <= 255 =>
        {
            s.clone()
        }
        Some(v) => {
            return Err(bad(format!(
                "Invalid input for field/attribute name. Value: {v}. {v} is not a valid name"
            )))
        }
        None => {
            return Err(bad(
                "Invalid input for field/attribute server_group. 'name' is a required property",
            ))
        }
    };
    let enum_err = |v: &Value| {
        let allowed: Vec<&str> = POLICIES
            .iter()
            .copied()
            .filter(|p| policy_ok(ctx, p))
            .collect();
        bad(format!(
            "Invalid input for field/attribute policy. Value: {v}. {v} is not one of {allowed:?}"
        ))
    };
    if ctx.mv.at_least(64) {
        let policy = match o.get("policy") {
            Some(Value::String(p)) if policy_ok(ctx, p) => p.clone(),
            Some(v) => return Err(enum_err(v)),
            None => return Err(bad(
                "Invalid input for field/attribute server_group. 'policy' is a required property",
            )),
        };
        let rules = match o.get("rules") {
            None => None,
            Some(Value::Object(r)) => {
                if let Some(k) = r.keys().find(|k| k.as_str() != "max_server_per_host") {
                    return Err(bad(format!(
                        "Additional properties are not allowed ('{k}' was unexpected)"
                    )));
                }
                if !r.is_empty() && policy != "anti-affinity" {
                    return Err(bad("Only anti-affinity policy supports rules."));
                }
                match r.get("max_server_per_host") {
                    None => None,
                    Some(m) => {
                        let n = m
                            .as_i64()
                            .or_else(|| m.as_str().and_then(|s| s.parse::<i64>().ok()))
                            .filter(|n| *n >= 1)
                            .ok_or_else(|| {
                                bad(format!(
                                    "Invalid input for field/attribute max_server_per_host. Value: {m}. \
                                     It must be a positive integer"
                                ))
                            })?;
                        Some(json!({ "max_server_per_host": n }).to_string())
                    }
                }
            }
            Some(v) => {
                return Err(bad(format!(
                "Invalid input for field/attribute rules. Value: {v}. {v} is not of type 'object'"
            )))
            }
        };
        Ok((name, policy, rules))
    } else {
        let policy = match o.get("policies") {
            Some(Value::Array(a)) if a.len() == 1 => match &a[0] {
                Value::String(p) if policy_ok(ctx, p) => p.clone(),
                v => return Err(enum_err(v)),
            },
            Some(v) => {
                return Err(bad(format!(
                    "Invalid input for field/attribute policies. Value: {v}. It must be a list of \
                     exactly one policy"
                )))
            }
            None => return Err(bad(
                "Invalid input for field/attribute server_group. 'policies' is a required property",
            )),
        };
        Ok((name, policy, None))
    }
}

/// `POST /os-server-groups`.
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    app.authorize(
        &ctx,
        "os_compute_api:os-server-groups:create",
        ctx.project_id(),
    )?;
    let v: Value = serde_json::from_slice(&body).map_err(|_| bad("Malformed request body"))?;
    let o = match v.get("server_group") {
        Some(Value::Object(o)) => o,
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute server_group. Value: {other}. {other} is not of type 'object'"
            )))
        }
        None => {
            return Err(bad(
                "Invalid input for field/attribute body. 'server_group' is a required property",
            ))
        }
    };
    let (name, policy, rules) = parse_create(&ctx, o)?;
    // Counted and written under the project's quota lock: concurrent
    // creates cannot pass the limit.
    let limit = super::quotas::limit(&app, ctx.project_id(), "server_groups").await?;
    // Nova also holds the user to its own limit: when the user has one that
    // differs from the project's, its groups are counted under the same
    // lock.
    let mine =
        super::quotas::user_limit(&app, ctx.project_id(), ctx.user_id(), "server_groups").await?;
    let uuid = app
        .db()
        .api()
        .server_group_create_limited(
            &NewServerGroup {
                name,
                user_id: ctx.user_id().to_owned(),
                project_id: ctx.project_id().to_owned(),
                policy,
                rules,
            },
            Some(limit),
            (mine != limit).then_some(mine),
        )
        .await?
        .ok_or_else(|| ApiError::Forbidden("Quota exceeded, too many server groups.".into()))?;
    let g = app
        .db()
        .api()
        .server_group(&uuid)
        .await?
        .ok_or_else(|| not_found(&uuid))?;
    Ok(Json(json!({ "server_group": view(&ctx, &g) })))
}

/// `GET /os-server-groups/{id}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    let g = visible(&app, &ctx, &id, "os_compute_api:os-server-groups:show").await?;
    Ok(Json(json!({ "server_group": view(&ctx, &g) })))
}

/// `DELETE /os-server-groups/{id}`.
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    visible(&app, &ctx, &id, "os_compute_api:os-server-groups:delete").await?;
    if !app.db().api().server_group_delete(&id).await? {
        return Err(not_found(&id));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The `group` scheduler hint of a create body (`os:scheduler_hints` or
/// `OS-SCH-HNT:scheduler_hints`, beside `server`): a group UUID.
pub(crate) fn group_hint(body: &Value) -> ApiResult<Option<String>> {
    let hints = body
        .get("os:scheduler_hints")
        .or_else(|| body.get("OS-SCH-HNT:scheduler_hints"));
    let Some(hints) = hints else {
        return Ok(None);
    };
    let Some(h) = hints.as_object() else {
        return Err(bad(format!(
            "Invalid input for field/attribute os:scheduler_hints. Value: {hints}. {hints} is not of type 'object'"
        )));
    };
    match h.get("group") {
        None => Ok(None),
        Some(Value::String(g)) if uuid::Uuid::parse_str(g).is_ok() => Ok(Some(g.clone())),
        Some(v) => Err(bad(format!(
            "Invalid input for field/attribute group. Value: {v}. {v} is not a 'uuid'"
        ))),
    }
}

/// The group a create names, if the caller may use it (an unknown group,
/// or another project's for a non-admin, is a bad request).
pub(crate) async fn for_boot(app: &App, ctx: &Ctx, id: &str) -> ApiResult<ServerGroup> {
    match visible(app, ctx, id, "os_compute_api:os-server-groups:show").await {
        Ok(g) => Ok(g),
        Err(ApiError::NotFound(_)) | Err(ApiError::Forbidden(_)) => Err(bad(format!(
            "Invalid server group: Instance group {id} could not be found."
        ))),
        Err(e) => Err(e),
    }
}
