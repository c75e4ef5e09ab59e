//! Flavor management (admin): `POST /flavors`, `DELETE /flavors/{id}`,
//! `PUT /flavors/{id}` (description, 2.55); extra specs
//! (`/flavors/{id}/os-extra_specs[/{key}]`); access to private flavors
//! (`GET /flavors/{id}/os-flavor-access`, `POST /flavors/{id}/action` with
//! `addTenantAccess` / `removeTenantAccess`).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Map, Value};

use super::body_schema::{self, MetaValues};
use super::db::FlavorSpec;
use super::error::{ApiError, ApiResult};
use super::flavors::{detail_with_specs, visible};
use super::query_schema;
use super::{App, Ctx};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

fn body_object(body: &[u8], root: &str) -> ApiResult<Map<String, Value>> {
    let v: Value = serde_json::from_slice(body).map_err(|_| bad("Malformed request body"))?;
    match v.get(root) {
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(other) => Err(bad(format!(
            "Invalid input for field/attribute {root}. Value: {other}. {other} is not of type 'object'"
        ))),
        None => Err(bad(format!(
            "Invalid input for field/attribute {root}. Value: None. '{root}' is a required property"
        ))),
    }
}

/// An integer field (JSON integer or a string of digits) with a minimum.
fn int(o: &Map<String, Value>, key: &str, min: i64, required: bool) -> ApiResult<Option<i64>> {
    let Some(v) = o.get(key) else {
        if required {
            return Err(bad(format!(
                "Invalid input for field/attribute flavor. Value: None. '{key}' is a required property"
            )));
        }
        return Ok(None);
    };
    let n = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n < min => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. {n} is less than the minimum of {min}"
        ))),
        Some(n) if n > i64::from(i32::MAX) => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. {n} is greater than the maximum of {}",
            i32::MAX
        ))),
        Some(n) => Ok(Some(n)),
        None => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. {v} is not of type 'integer', 'string'"
        ))),
    }
}

fn valid_name(s: &str) -> bool {
    let n = s.chars().count();
    (1..=255).contains(&n) && s.trim() == s && !s.chars().any(char::is_control)
}

fn valid_id(s: &str) -> bool {
    (1..=255).contains(&s.len())
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ' ' | '_' | '-'))
}

fn description(ctx: &Ctx, o: &Map<String, Value>) -> ApiResult<Option<Option<String>>> {
    match o.get("description") {
        None => Ok(None),
        Some(_) if !ctx.mv.at_least(55) => Err(bad(
            "Invalid input for field/attribute flavor. Additional properties are not allowed ('description' was unexpected)",
        )),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) if s.chars().count() <= 65535 && !s.chars().any(|c| c.is_control() && c != '\n' && c != '\r' && c != '\t') => {
            Ok(Some(Some(s.clone())))
        }
        Some(other) => Err(bad(format!(
            "Invalid input for field/attribute description. Value: {other}. {other} is not valid"
        ))),
    }
}

/// `POST /flavors` (admin).
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    app.authorize(
        &ctx,
        "os_compute_api:os-flavor-manage:create",
        ctx.project_id(),
    )?;
    let o = body_object(&body, "flavor")?;
    const ALLOWED: &[&str] = &[
        "name",
        "id",
        "ram",
        "vcpus",
        "disk",
        "OS-FLV-EXT-DATA:ephemeral",
        "swap",
        "rxtx_factor",
        "os-flavor-access:is_public",
        "description",
    ];
    // 2.102 removed `rxtx_factor` (and `description` came in 2.55).
    let known = |k: &str| {
        ALLOWED.contains(&k)
            && !(k == "rxtx_factor" && ctx.mv.at_least(102))
            && (k != "description" || ctx.mv.at_least(55))
    };
    if let Some(k) = o.keys().find(|k| !known(k.as_str())) {
        return Err(bad(format!(
            "Invalid input for field/attribute flavor. Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let name = match o.get("name") {
        Some(Value::String(s)) if valid_name(s) => s.clone(),
        Some(v) => {
            return Err(bad(format!(
                "Invalid input for field/attribute name. Value: {v}. {v} does not match the name pattern"
            )))
        }
        None => {
            return Err(bad(
                "Invalid input for field/attribute flavor. Value: None. 'name' is a required property",
            ))
        }
    };
    let flavorid = match o.get("id") {
        None | Some(Value::Null) => uuid::Uuid::new_v4().to_string(),
        Some(Value::String(s)) if valid_id(s) => s.clone(),
        Some(Value::Number(n)) if n.is_i64() => n.to_string(),
        Some(v) => {
            return Err(bad(format!(
                "Invalid input for field/attribute id. Value: {v}. {v} does not match '^(?! )[a-zA-Z0-9. _-]+(?<! )$'"
            )))
        }
    };
    let memory_mb = int(&o, "ram", 1, true)?.unwrap_or(1);
    let vcpus = int(&o, "vcpus", 1, true)?.unwrap_or(1);
    let root_gb = int(&o, "disk", 0, true)?.unwrap_or(0);
    let ephemeral_gb = int(&o, "OS-FLV-EXT-DATA:ephemeral", 0, false)?.unwrap_or(0);
    let swap = match o.get("swap") {
        Some(Value::String(s)) if s.is_empty() => 0,
        _ => int(&o, "swap", 0, false)?.unwrap_or(0),
    };
    let rxtx_factor = match o.get("rxtx_factor") {
        None => 1.0,
        Some(v) => {
            let f = match v {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => s.trim().parse::<f64>().ok(),
                _ => None,
            };
            match f {
                Some(f) if f > 0.0 && f <= 3.40282e38 && f.is_finite() => f,
                _ => {
                    return Err(bad(format!(
                        "Invalid input for field/attribute rxtx_factor. Value: {v}. {v} is less than or equal to the minimum of 0"
                    )))
                }
            }
        }
    };
    let is_public = match o.get("os-flavor-access:is_public") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if matches!(s.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on") => true,
        Some(Value::String(s)) if matches!(s.to_ascii_lowercase().as_str(), "false" | "0" | "no" | "off") => false,
        Some(v) => {
            return Err(bad(format!(
                "Invalid input for field/attribute os-flavor-access:is_public. Value: {v}. {v} is not of type 'boolean'"
            )))
        }
    };
    let description = description(&ctx, &o)?.flatten();
    let f = app
        .db
        .flavor_create(&FlavorSpec {
            flavorid,
            name,
            memory_mb,
            vcpus,
            root_gb,
            ephemeral_gb,
            swap,
            rxtx_factor,
            is_public,
            description,
        })
        .await?;
    Ok(Json(
        json!({ "flavor": detail_with_specs(&app, &ctx, &f).await? }),
    ))
}

/// `DELETE /flavors/{id}` (admin): 202.
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    app.authorize(
        &ctx,
        "os_compute_api:os-flavor-manage:delete",
        ctx.project_id(),
    )?;
    if !app.db.flavor_delete(&id).await? {
        return Err(ApiError::NotFound(format!(
            "Flavor {id} could not be found."
        )));
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `PUT /flavors/{id}` (admin, 2.55+): the description only.
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    if !ctx.mv.at_least(55) {
        return Err(ApiError::NotFound(
            "The resource could not be found.".into(),
        ));
    }
    app.authorize(
        &ctx,
        "os_compute_api:os-flavor-manage:update",
        ctx.project_id(),
    )?;
    let o = body_object(&body, "flavor")?;
    if let Some(k) = o.keys().find(|k| k.as_str() != "description") {
        return Err(bad(format!(
            "Invalid input for field/attribute flavor. Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let Some(d) = description(&ctx, &o)? else {
        return Err(bad(
            "Invalid input for field/attribute flavor. Value: {}. 'description' is a required property",
        ));
    };
    if !app.db.flavor_set_description(&id, d.as_deref()).await? {
        return Err(ApiError::NotFound(format!(
            "Flavor {id} could not be found."
        )));
    }
    let f = visible(&app, &ctx, &id).await?;
    Ok(Json(
        json!({ "flavor": detail_with_specs(&app, &ctx, &f).await? }),
    ))
}

// ------------------------------------------------------------ extra specs

/// Extra specs as Nova's schema has them (keys `^[a-zA-Z0-9-_:. ]{1,255}$`,
/// values strings of at most 255 characters or numbers, whose Python
/// `str` may not pass 255 characters either), as stored.
fn spec_pairs(field: Option<&str>, v: &Value) -> ApiResult<Vec<(String, String)>> {
    let specs = body_schema::metadata(field, v, MetaValues::OrNumber)?;
    let mut out = Vec::with_capacity(specs.len());
    for (k, value) in specs {
        let value = value.unwrap_or_default();
        let n = value.chars().count();
        if n > 255 {
            return Err(bad(format!(
                "extra_specs value has {n} characters, more than 255."
            )));
        }
        out.push((k, value));
    }
    Ok(out)
}

async fn specs_of(app: &App, id: i64) -> ApiResult<BTreeMap<String, String>> {
    Ok(app
        .db
        .extra_specs(&[id])
        .await?
        .remove(&id)
        .unwrap_or_default())
}

/// `GET /flavors/{id}/os-extra_specs`.
pub async fn specs_index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    app.authorize(
        &ctx,
        "os_compute_api:os-flavor-extra-specs:index",
        ctx.project_id(),
    )?;
    let f = visible(&app, &ctx, &id).await?;
    Ok(Json(json!({ "extra_specs": specs_of(&app, f.id).await? })))
}

/// `POST /flavors/{id}/os-extra_specs` (admin): creates or updates;
/// 200 with the body as given (numbers stay numbers), as Nova.
pub async fn specs_create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v = body_schema::parse(&body)?;
    let pairs = match body_schema::top(&v, "extra_specs")? {
        Some(specs) => spec_pairs(Some("extra_specs"), specs)?,
        None => Vec::new(),
    };
    body_schema::only(&v, "extra_specs")?;
    app.authorize(
        &ctx,
        "os_compute_api:os-flavor-extra-specs:create",
        ctx.project_id(),
    )?;
    let f = visible(&app, &ctx, &id).await?;
    app.db.extra_specs_set(f.id, &pairs).await?;
    Ok(Json(v))
}

fn no_key(id: &str, key: &str) -> ApiError {
    ApiError::NotFound(format!("Flavor {id} has no extra specs with key {key}."))
}

/// `GET /flavors/{id}/os-extra_specs/{key}`.
pub async fn spec_show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, key)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    app.authorize(
        &ctx,
        "os_compute_api:os-flavor-extra-specs:show",
        ctx.project_id(),
    )?;
    let f = visible(&app, &ctx, &id).await?;
    let v = specs_of(&app, f.id)
        .await?
        .remove(&key)
        .ok_or_else(|| no_key(&id, &key))?;
    Ok(Json(json!({ key: v })))
}

/// `PUT /flavors/{id}/os-extra_specs/{key}` (admin): `{key: value}`,
/// 200 with the body as given.
pub async fn spec_update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, key)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v = body_schema::parse(&body)?;
    // The body is the one spec (the schema's `minProperties` and
    // `maxProperties` 1 follow its values and keys).
    let pairs = spec_pairs(None, &v)?;
    match v.as_object().map(Map::len) {
        Some(0) => return Err(bad("{} does not have enough properties")),
        Some(n) if n > 1 => {
            return Err(bad(format!(
                "{} has too many properties",
                query_schema::python_value_repr(&v)
            )))
        }
        _ => {}
    }
    app.authorize(
        &ctx,
        "os_compute_api:os-flavor-extra-specs:update",
        ctx.project_id(),
    )?;
    if !v.as_object().is_some_and(|o| o.contains_key(&key)) {
        return Err(bad("Request body and URI mismatch"));
    }
    let f = visible(&app, &ctx, &id).await?;
    app.db.extra_specs_set(f.id, &pairs).await?;
    Ok(Json(v))
}

/// `DELETE /flavors/{id}/os-extra_specs/{key}` (admin): 200 without a
/// body, as Nova.
pub async fn spec_delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, key)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    app.authorize(
        &ctx,
        "os_compute_api:os-flavor-extra-specs:delete",
        ctx.project_id(),
    )?;
    let f = visible(&app, &ctx, &id).await?;
    if !app.db.extra_spec_delete(f.id, &key).await? {
        return Err(no_key(&id, &key));
    }
    Ok(StatusCode::OK)
}

// ----------------------------------------------------------------- access

async fn access_list(app: &App, flavorid: &str, id: i64) -> ApiResult<Value> {
    let list: Vec<Value> = app
        .db
        .flavor_projects(id)
        .await?
        .into_iter()
        .map(|p| json!({"flavor_id": flavorid, "tenant_id": p}))
        .collect();
    Ok(json!({ "flavor_access": list }))
}

/// `GET /flavors/{id}/os-flavor-access` (admin).
pub async fn access_index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-flavor-access", ctx.project_id())?;
    let f = visible(&app, &ctx, &id).await?;
    if f.is_public {
        return Err(ApiError::NotFound(
            "Access list not available for public flavors.".into(),
        ));
    }
    Ok(Json(access_list(&app, &f.flavorid, f.id).await?))
}

fn tenant_of(v: &Value, action: &str) -> ApiResult<String> {
    match v.get("tenant") {
        Some(Value::String(t)) if !t.is_empty() && t.len() <= 255 => Ok(t.clone()),
        Some(other) => Err(bad(format!(
            "Invalid input for field/attribute tenant. Value: {other}. {other} is not valid"
        ))),
        None => Err(bad(format!(
            "Invalid input for field/attribute {action}. Value: {v}. 'tenant' is a required property"
        ))),
    }
}

/// `POST /flavors/{id}/action`: `addTenantAccess` / `removeTenantAccess`
/// (admin).
pub async fn action(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v: Value = serde_json::from_slice(&body).map_err(|_| bad("Malformed request body"))?;
    if let Some(a) = v.get("addTenantAccess") {
        app.authorize(
            &ctx,
            "os_compute_api:os-flavor-access:add_tenant_access",
            ctx.project_id(),
        )?;
        let tenant = tenant_of(a, "addTenantAccess")?;
        let f = visible(&app, &ctx, &id).await?;
        if f.is_public {
            return Err(ApiError::Conflict(
                "Can not add access to a public flavor.".into(),
            ));
        }
        if !app.db.flavor_access_add(f.id, &tenant).await? {
            return Err(ApiError::Conflict(format!(
                "Flavor access already exists for flavor {id} and project {tenant} combination."
            )));
        }
        return Ok(Json(access_list(&app, &f.flavorid, f.id).await?));
    }
    if let Some(a) = v.get("removeTenantAccess") {
        app.authorize(
            &ctx,
            "os_compute_api:os-flavor-access:remove_tenant_access",
            ctx.project_id(),
        )?;
        let tenant = tenant_of(a, "removeTenantAccess")?;
        let f = visible(&app, &ctx, &id).await?;
        if !app.db.flavor_access_remove(f.id, &tenant).await? {
            return Err(ApiError::NotFound(format!(
                "Flavor access not found for {id} / {tenant} combination."
            )));
        }
        return Ok(Json(access_list(&app, &f.flavorid, f.id).await?));
    }
    Err(bad(
        "There is no such action: the body must hold addTenantAccess or removeTenantAccess",
    ))
}
