//! Server metadata (`/servers/{id}/metadata[/{key}]`) and server tags
//! (`/servers/{id}/tags[/{tag}]`, 2.26). Both write the instance's cell
//! database from the API layer, as upstream (rows of the instance, no
//! compute involved).

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cell_mapping::db::server_actions::WriteOutcome;
use cell_mapping::{CellDb, CellMapping};
use fabric::rpc::vm_state as vs;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::server_actions::metadata_object;
use super::servers::lookup::{find, Found};
use super::servers::model::Server;
use super::{App, Ctx};

/// Nova's default `metadata_items` quota.
pub const MAX_METADATA_ITEMS: i64 = 128;
/// Nova's per-server tag limit.
pub const MAX_TAGS: i64 = 50;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

fn key_ok(k: &str) -> bool {
    let n = k.chars().count();
    (1..=255).contains(&n)
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.' | ' '))
}

/// Validates a metadata object as upstream's schema (keys of 1–255
/// characters from `[a-zA-Z0-9-_:. ]`, string values of at most 255).
pub(crate) fn validate_metadata(v: &Value, field: &str) -> ApiResult<Vec<(String, String)>> {
    let Some(o) = v.as_object() else {
        return Err(bad(format!(
            "Invalid input for field/attribute {field}. Value: {v}. {v} is not of type 'object'"
        )));
    };
    let mut out = Vec::with_capacity(o.len());
    for (k, val) in o {
        if !key_ok(k) {
            return Err(bad(format!(
                "Invalid input for field/attribute {field}. Value: {v}. Additional properties are not allowed ('{k}' was unexpected)"
            )));
        }
        match val {
            Value::String(s) if s.chars().count() <= 255 => out.push((k.clone(), s.clone())),
            Value::String(s) => {
                return Err(bad(format!(
                    "Invalid input for field/attribute {k}. Value: {s}. '{s}' is too long"
                )))
            }
            other => {
                return Err(bad(format!(
                    "Invalid input for field/attribute {k}. Value: {other}. {other} is not of type 'string'"
                )))
            }
        }
    }
    out.sort();
    Ok(out)
}

fn body_json(body: &Bytes) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|_| bad("Malformed request body"))
}

async fn located(
    app: &App,
    ctx: &Ctx,
    id: &str,
    rule: &str,
) -> ApiResult<Option<(CellMapping, Server)>> {
    Ok(match find(app, ctx, id, rule).await? {
        Found::Build(_) => None,
        Found::Cell(c, s) => Some((c, s)),
    })
}

async fn cell_db(app: &App, cell: &CellMapping) -> ApiResult<CellDb> {
    app.cells.db(cell).await.map_err(ApiError::from)
}

/// The server, checked for a metadata write: not locked (but for admins),
/// vm_state active/paused/suspended/stopped, no task (as upstream).
async fn writable(
    app: &App,
    ctx: &Ctx,
    id: &str,
    rule: &str,
    what: &str,
) -> ApiResult<(CellDb, Server)> {
    let Some((cell, s)) = located(app, ctx, id, rule).await? else {
        return Err(ApiError::Conflict(format!(
            "Cannot '{what}' instance {id} while it is in vm_state {}",
            vs::BUILDING
        )));
    };
    if s.locked && !ctx.is_admin() {
        return Err(ApiError::Conflict(format!("Instance {id} is locked")));
    }
    if ![vs::ACTIVE, vs::PAUSED, vs::SUSPENDED, vs::STOPPED].contains(&s.vm_state.as_str()) {
        return Err(ApiError::Conflict(format!(
            "Cannot '{what}' instance {id} while it is in vm_state {}",
            s.vm_state
        )));
    }
    if let Some(t) = &s.task_state {
        return Err(ApiError::Conflict(format!(
            "Cannot '{what}' instance {id} while it is in task_state {t}"
        )));
    }
    Ok((cell_db(app, &cell).await?, s))
}

fn outcome(id: &str, o: WriteOutcome) -> ApiResult<()> {
    match o {
        WriteOutcome::Done | WriteOutcome::Created => Ok(()),
        WriteOutcome::NotFound => Err(ApiError::server_not_found(id)),
        WriteOutcome::TooMany => Err(ApiError::Forbidden(format!(
            "Quota exceeded for metadata_items: Maximum number of metadata items exceeds {MAX_METADATA_ITEMS}"
        ))),
    }
}

async fn read_metadata(db: &CellDb, id: &str) -> ApiResult<Vec<(String, String)>> {
    Ok(db
        .api_metadata(&[id.to_owned()])
        .await?
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .collect())
}

/// `GET /servers/{id}/metadata`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    let items = match located(&app, &ctx, &id, "os_compute_api:server-metadata:index").await? {
        None => Vec::new(),
        Some((_, s)) => s.metadata,
    };
    Ok(Json(json!({"metadata": metadata_object(&items)})))
}

/// `POST /servers/{id}/metadata` (merge) and `PUT` (replace all).
async fn write_all(
    app: &App,
    ctx: &Ctx,
    id: &str,
    body: &Bytes,
    replace: bool,
) -> ApiResult<Json<Value>> {
    let v = body_json(body)?;
    let Some(m) = v.get("metadata") else {
        return Err(bad(
            "Invalid input for field/attribute metadata. 'metadata' is a required property",
        ));
    };
    let items = validate_metadata(m, "metadata")?;
    let rule = if replace {
        "os_compute_api:server-metadata:update_all"
    } else {
        "os_compute_api:server-metadata:create"
    };
    let (db, _) = writable(app, ctx, id, rule, "update metadata").await?;
    outcome(
        id,
        db.api_metadata_set(id, &items, replace, MAX_METADATA_ITEMS)
            .await?,
    )?;
    let all = if replace {
        items
    } else {
        read_metadata(&db, id).await?
    };
    Ok(Json(json!({"metadata": metadata_object(&all)})))
}

/// `POST /servers/{id}/metadata`.
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    write_all(&app, &ctx, &id, &body, false).await
}

/// `PUT /servers/{id}/metadata`.
pub async fn update_all(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    write_all(&app, &ctx, &id, &body, true).await
}

fn item_not_found() -> ApiError {
    ApiError::NotFound("Metadata item was not found".into())
}

/// `GET /servers/{id}/metadata/{key}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, key)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    let Some((_, s)) = located(&app, &ctx, &id, "os_compute_api:server-metadata:show").await?
    else {
        return Err(item_not_found());
    };
    let (_, v) = s
        .metadata
        .into_iter()
        .find(|(k, _)| *k == key)
        .ok_or_else(item_not_found)?;
    Ok(Json(json!({"meta": {key: v}})))
}

/// `PUT /servers/{id}/metadata/{key}`.
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, key)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v = body_json(&body)?;
    let Some(m) = v.get("meta") else {
        return Err(bad(
            "Invalid input for field/attribute meta. 'meta' is a required property",
        ));
    };
    let items = validate_metadata(m, "meta")?;
    if items.len() > 1 {
        return Err(bad("Request body contains too many items"));
    }
    let Some((k, val)) = items.first().cloned() else {
        return Err(bad(format!(
            "Invalid input for field/attribute meta. Value: {m}. {m} does not have enough properties"
        )));
    };
    if k != key {
        return Err(bad("Request body and URI mismatch"));
    }
    let (db, _) = writable(
        &app,
        &ctx,
        &id,
        "os_compute_api:server-metadata:update",
        "update metadata",
    )
    .await?;
    outcome(
        &id,
        db.api_metadata_set(&id, &items, false, MAX_METADATA_ITEMS)
            .await?,
    )?;
    Ok(Json(json!({"meta": {k: val}})))
}

/// `DELETE /servers/{id}/metadata/{key}`.
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, key)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let (db, s) = writable(
        &app,
        &ctx,
        &id,
        "os_compute_api:server-metadata:delete",
        "delete metadata",
    )
    .await?;
    if !s.metadata.iter().any(|(k, _)| *k == key) || !db.api_metadata_delete(&id, &key).await? {
        return Err(item_not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

// -------------------------------------------------------------------- tags

fn tags_version(ctx: &Ctx) -> ApiResult<()> {
    if ctx.mv.at_least(26) {
        Ok(())
    } else {
        Err(ApiError::NotFound(
            "The resource could not be found.".into(),
        ))
    }
}

pub(crate) fn validate_tag(t: &Value) -> ApiResult<String> {
    match t {
        Value::String(s) if !s.is_empty() && s.chars().count() <= 60 && !s.contains(['/', ',']) => {
            Ok(s.clone())
        }
        Value::String(s) if s.is_empty() => Err(bad(format!(
            "Invalid input for field/attribute tag. Value: {s}. '{s}' is too short"
        ))),
        Value::String(s) if s.chars().count() > 60 => Err(bad(format!(
            "Invalid input for field/attribute tag. Value: {s}. '{s}' is too long"
        ))),
        Value::String(s) => Err(bad(format!(
            "Invalid input for field/attribute tag. Value: {s}. '{s}' does not match '^[^,/]*$'"
        ))),
        other => Err(bad(format!(
            "Invalid input for field/attribute tag. Value: {other}. {other} is not of type 'string'"
        ))),
    }
}

/// The server, checked for a tag write (vm_state as upstream).
async fn taggable(
    app: &App,
    ctx: &Ctx,
    id: &str,
    rule: &str,
    what: &str,
) -> ApiResult<(CellDb, Server)> {
    tags_version(ctx)?;
    let Some((cell, s)) = located(app, ctx, id, rule).await? else {
        return Err(ApiError::Conflict(format!(
            "Cannot '{what}' instance {id} while it is in vm_state {}",
            vs::BUILDING
        )));
    };
    if ![
        vs::ACTIVE,
        vs::PAUSED,
        vs::SUSPENDED,
        vs::STOPPED,
        "shelved",
        "shelved_offloaded",
    ]
    .contains(&s.vm_state.as_str())
    {
        return Err(ApiError::Conflict(format!(
            "Cannot '{what}' instance {id} while it is in vm_state {}",
            s.vm_state
        )));
    }
    Ok((cell_db(app, &cell).await?, s))
}

/// `GET /servers/{id}/tags`.
pub async fn tags_index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    tags_version(&ctx)?;
    let tags = match located(&app, &ctx, &id, "os_compute_api:os-server-tags:index").await? {
        None => Vec::new(),
        Some((_, s)) => s.tags,
    };
    Ok(Json(json!({ "tags": tags })))
}

/// `PUT /servers/{id}/tags`: replaces every tag.
pub async fn tags_update_all(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    tags_version(&ctx)?;
    let v = body_json(&body)?;
    let Some(list) = v.get("tags") else {
        return Err(bad(
            "Invalid input for field/attribute tags. 'tags' is a required property",
        ));
    };
    let Some(list) = list.as_array() else {
        return Err(bad(format!(
            "Invalid input for field/attribute tags. Value: {list}. {list} is not of type 'array'"
        )));
    };
    let mut tags = list
        .iter()
        .map(validate_tag)
        .collect::<ApiResult<Vec<_>>>()?;
    tags.sort();
    tags.dedup();
    if tags.len() as i64 > MAX_TAGS {
        return Err(bad(format!(
            "The number of tags exceeded the per-server limit {MAX_TAGS}"
        )));
    }
    let (db, _) = taggable(
        &app,
        &ctx,
        &id,
        "os_compute_api:os-server-tags:update_all",
        "update tags",
    )
    .await?;
    match db.api_tags_replace(&id, &tags).await? {
        WriteOutcome::NotFound => Err(ApiError::server_not_found(&id)),
        _ => Ok(Json(json!({ "tags": tags }))),
    }
}

/// `DELETE /servers/{id}/tags`.
pub async fn tags_delete_all(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let (db, _) = taggable(
        &app,
        &ctx,
        &id,
        "os_compute_api:os-server-tags:delete_all",
        "delete tags",
    )
    .await?;
    if !db.api_tag_delete(&id, None).await? {
        return Err(ApiError::server_not_found(&id));
    }
    Ok(StatusCode::NO_CONTENT)
}

fn tag_not_found(id: &str, tag: &str) -> ApiError {
    ApiError::NotFound(format!("Tag '{tag}' does not exist on instance {id}"))
}

/// `GET /servers/{id}/tags/{tag}`: 204 when present.
pub async fn tag_show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, tag)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    tags_version(&ctx)?;
    match located(&app, &ctx, &id, "os_compute_api:os-server-tags:show").await? {
        Some((_, s)) if s.tags.contains(&tag) => Ok(StatusCode::NO_CONTENT),
        _ => Err(tag_not_found(&id, &tag)),
    }
}

/// `PUT /servers/{id}/tags/{tag}`: 201 with a Location when new, else 204.
pub async fn tag_add(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, tag)): Path<(String, String)>,
) -> ApiResult<Response> {
    tags_version(&ctx)?;
    let tag = validate_tag(&Value::String(tag))?;
    let (db, _) = taggable(
        &app,
        &ctx,
        &id,
        "os_compute_api:os-server-tags:update",
        "update tag",
    )
    .await?;
    match db.api_tag_add(&id, &tag, MAX_TAGS).await? {
        WriteOutcome::Created => {
            let location = format!("{}/v2.1/servers/{id}/tags/{tag}", app.public_url());
            Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
        }
        WriteOutcome::Done => Ok(StatusCode::NO_CONTENT.into_response()),
        WriteOutcome::NotFound => Err(ApiError::server_not_found(&id)),
        WriteOutcome::TooMany => Err(bad(format!(
            "The number of tags exceeded the per-server limit {MAX_TAGS}"
        ))),
    }
}

/// `DELETE /servers/{id}/tags/{tag}`.
pub async fn tag_delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, tag)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let (db, _) = taggable(
        &app,
        &ctx,
        &id,
        "os_compute_api:os-server-tags:delete",
        "delete tag",
    )
    .await?;
    if !db.api_tag_delete(&id, Some(&tag)).await? {
        return Err(tag_not_found(&id, &tag));
    }
    Ok(StatusCode::NO_CONTENT)
}
