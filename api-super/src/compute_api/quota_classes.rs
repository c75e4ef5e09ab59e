//! `os-quota-class-sets` (admin): `GET` and `PUT
//! /os-quota-class-sets/{class}`, as Nova's. A class's limits are its own
//! rows (the API database's `quota_classes`) over the `default` class's
//! over the configured defaults; the `default` class's limits are the
//! defaults every project's quota set shows and is held to (see
//! [`super::quotas`]). Other class names are kept and shown but, as in
//! Nova, apply to no project.
//!
//! Resources by microversion, as Nova's `quota_classes.py`: below 2.50 the
//! network proxies (fixed_ips, floating_ips, security_groups,
//! security_group_rules) and no server_groups / server_group_members;
//! from 2.50 those two and no network proxies (nor `networks` in an
//! update); from 2.57 no injected_file*.

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde_json::{json, Map, Value};

use super::error::{ApiError, ApiResult};
use super::quotas::{class_limits, quota_value};
use super::{body_schema, App, Ctx};

/// Shown at every microversion.
const ALWAYS: &[&str] = &["instances", "cores", "ram", "metadata_items", "key_pairs"];
/// Shown below 2.57.
const INJECTED: &[&str] = &[
    "injected_files",
    "injected_file_content_bytes",
    "injected_file_path_bytes",
];
/// Shown below 2.50.
const NETWORK: &[&str] = &[
    "fixed_ips",
    "floating_ips",
    "security_groups",
    "security_group_rules",
];
/// Shown from 2.50.
const GROUPS: &[&str] = &["server_groups", "server_group_members"];

/// The resources a class set shows at the request's microversion.
fn shown(ctx: &Ctx) -> Vec<&'static str> {
    let mut v = ALWAYS.to_vec();
    if !ctx.mv.at_least(57) {
        v.extend(INJECTED);
    }
    if ctx.mv.at_least(50) {
        v.extend(GROUPS);
    } else {
        v.extend(NETWORK);
    }
    v
}

/// The keys an update may set at the request's microversion (Nova's
/// `update`, `update_v250`, `update_v257` schemas: below 2.50 also
/// `networks` and the server group resources).
fn settable(ctx: &Ctx) -> Vec<&'static str> {
    let mut v = ALWAYS.to_vec();
    v.extend(GROUPS);
    if !ctx.mv.at_least(57) {
        v.extend(INJECTED);
    }
    if !ctx.mv.at_least(50) {
        v.extend(NETWORK);
        v.push("networks");
    }
    v
}

async fn view(app: &App, ctx: &Ctx, class: &str) -> ApiResult<Map<String, Value>> {
    let limits = class_limits(app, class).await?;
    Ok(shown(ctx)
        .into_iter()
        .map(|r| (r.to_owned(), json!(limits.get(r).copied().unwrap_or(-1))))
        .collect())
}

/// `GET /os-quota-class-sets/{class}` (admin).
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(class): Path<String>,
) -> ApiResult<Json<Value>> {
    app.authorize(
        &ctx,
        "os_compute_api:os-quota-class-sets:show",
        ctx.project_id(),
    )?;
    let mut v = view(&app, &ctx, &class).await?;
    v.insert("id".into(), json!(class));
    Ok(Json(json!({ "quota_class_set": v })))
}

/// `PUT /os-quota-class-sets/{class}` (admin): `{"quota_class_set":
/// {resource: limit, ...}}`, each created or updated; answers the class's
/// limits without `id`, as Nova.
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(class): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    app.authorize(
        &ctx,
        "os_compute_api:os-quota-class-sets:update",
        ctx.project_id(),
    )?;
    let v = body_schema::parse(&body)?;
    let allowed = settable(&ctx);
    let changes = body_schema::member(&v, "quota_class_set", &allowed, &[], |set| {
        let mut out = Vec::new();
        // Only the schema's properties are checked here; any other key is
        // the `additionalProperties` 400 that follows.
        for (k, val) in set {
            if allowed.contains(&k.as_str()) {
                out.push((k.clone(), quota_value(k, val)?));
            }
        }
        Ok(out)
    })?;
    // Nova's `check_string_length(id, 'quota_class_name', 1, 255)`.
    let chars = class.chars().count();
    if chars > 255 {
        return Err(ApiError::BadRequest(
            "quota_class_name has more than 255 characters.".into(),
        ));
    }
    if chars == 0 {
        return Err(ApiError::BadRequest(
            "quota_class_name has a minimum character requirement of 1.".into(),
        ));
    }
    app.db.quota_class_set(&class, &changes).await?;
    Ok(Json(
        json!({ "quota_class_set": view(&app, &ctx, &class).await? }),
    ))
}
