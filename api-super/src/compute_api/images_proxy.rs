//! Nova's deprecated image proxies, for old clients: `/images` (list,
//! detail, show, delete; gone from 2.36) and `/images/{id}/metadata`
//! (gone from 2.39), answered from the image service as the caller
//! ([`ImageProxy`]), in Nova's views: `minRam`, `minDisk`, `metadata`
//! (the extra properties), `status` and `progress` mapped from the image
//! service's status, `OS-EXT-IMG-SIZE:size`, `server` for a snapshot
//! (`instance_uuid`), `OS-DCF:diskConfig` from `auto_disk_config`, and
//! self, bookmark and alternate (the image service's) links. And the
//! network proxy `/os-networks` (to 2.35), which has no network service to
//! ask yet.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{TimeZone, Utc};
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::images::{ImageProxy, ProxyImage, ProxyQuery};
use super::server_actions::metadata_object;
use super::server_metadata::{validate_metadata, MAX_METADATA_ITEMS};
use super::servers::parse_query;
use super::servers::views::links;
use super::{App, Ctx};

fn gone() -> ApiError {
    ApiError::NotFound("The resource could not be found.".into())
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// The image service, for a microversion that still has the proxy
/// (`last`: the last one that does).
fn proxy<'a>(app: &'a App, ctx: &Ctx, last: u32) -> ApiResult<&'a dyn ImageProxy> {
    if ctx.mv.at_least(last + 1) {
        return Err(gone());
    }
    app.images
        .as_deref()
        .and_then(|l| l.proxy())
        .ok_or_else(|| {
            ApiError::NotImplemented(
                "There is no image service in this deployment for the images proxy.".into(),
            )
        })
}

/// The last microversion with `/images`.
const IMAGES_LAST: u32 = 35;
/// The last microversion with `/images/{id}/metadata`.
const METADATA_LAST: u32 = 38;

fn time(ms: i64) -> Value {
    Utc.timestamp_millis_opt(ms)
        .single()
        .map_or(Value::Null, |t| {
            json!(t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        })
}

fn image_links(app: &App, p: &dyn ImageProxy, id: &str) -> Value {
    let mut l = links(app, "images", id);
    let url = p.public_url();
    if let Some(arr) = l.as_array_mut() {
        arr.push(json!({
            "rel": "alternate",
            "type": "application/vnd.openstack.image",
            "href": format!("{}/images/{id}", url.trim_end_matches('/')),
        }));
    }
    l
}

fn brief(app: &App, p: &dyn ImageProxy, img: &ProxyImage) -> Value {
    json!({"id": img.id, "name": img.name, "links": image_links(app, p, &img.id)})
}

fn detail(app: &App, p: &dyn ImageProxy, img: &ProxyImage) -> Value {
    let status = match img.status.as_str() {
        "active" => "ACTIVE",
        "queued" | "saving" => "SAVING",
        "deleted" | "pending_delete" => "DELETED",
        "killed" => "ERROR",
        _ => "UNKNOWN",
    };
    let progress = match img.status.as_str() {
        "queued" => 25,
        "saving" => 50,
        "active" => 100,
        _ => 0,
    };
    let mut v = json!({
        "id": img.id,
        "name": img.name,
        "minRam": img.min_ram,
        "minDisk": img.min_disk,
        "metadata": img.properties,
        "created": time(img.created_at_ms),
        "updated": time(img.updated_at_ms),
        "status": status,
        "progress": progress,
        "OS-EXT-IMG-SIZE:size": img.size,
        "links": image_links(app, p, &img.id),
    });
    if let Some(server) = img.properties.get("instance_uuid") {
        v["server"] = json!({"id": server, "links": links(app, "servers", server)});
    }
    if let Some(auto) = img.properties.get("auto_disk_config") {
        let on = matches!(
            auto.to_ascii_lowercase().as_str(),
            "true" | "1" | "yes" | "on" | "y" | "t"
        );
        v["OS-DCF:diskConfig"] = json!(if on { "AUTO" } else { "MANUAL" });
    }
    v
}

/// Nova's `_get_filters` and paging parameters.
fn query(raw: Option<&str>) -> ApiResult<ProxyQuery> {
    let q = parse_query(raw);
    let mut out = ProxyQuery {
        name: q.get("name").cloned(),
        status: q.get("status").map(|s| s.to_ascii_lowercase()),
        ..Default::default()
    };
    for (k, v) in &q {
        if let Some(p) = k.strip_prefix("property-") {
            out.properties.insert(p.to_owned(), v.clone());
        }
    }
    if let Some(server) = q.get("server") {
        // A server's URL or its id.
        let id = server.rsplit('/').next().unwrap_or(server);
        out.properties.insert("instance_uuid".into(), id.to_owned());
    }
    if let Some(t) = q.get("type") {
        out.properties.insert("image_type".into(), t.clone());
    }
    if let Some(t) = q.get("changes-since") {
        let parsed = chrono::DateTime::parse_from_rfc3339(t)
            .map(|d| d.timestamp_millis())
            .or_else(|_| {
                chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S%.f")
                    .map(|d| d.and_utc().timestamp_millis())
            })
            .map_err(|_| bad(format!("Invalid changes-since value: {t}")))?;
        out.changes_since_ms = Some(parsed);
    }
    let int = |k: &str| -> ApiResult<Option<i64>> {
        q.get(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| bad(format!("Invalid {k} filter [{v}]")))
            })
            .transpose()
    };
    out.min_ram = int("minRam")?;
    out.min_disk = int("minDisk")?;
    if let Some(l) = q.get("limit") {
        out.limit = Some(match l.parse::<i64>() {
            Ok(n) if n >= 0 => u32::try_from(n).unwrap_or(u32::MAX),
            _ => return Err(bad("limit param must be an integer")),
        });
        if out.limit == Some(0) {
            return Err(bad("limit param must be positive"));
        }
    }
    out.marker = q.get("marker").cloned();
    Ok(out)
}

async fn list(app: &App, ctx: &Ctx, raw: Option<&str>, is_detail: bool) -> ApiResult<Json<Value>> {
    let p = proxy(app, ctx, IMAGES_LAST)?;
    let q = query(raw)?;
    let limit = q.limit;
    let (images, more) = p.list(&ctx.claims, &ctx.request_id, q).await?;
    let items: Vec<Value> = images
        .iter()
        .map(|i| {
            if is_detail {
                detail(app, p, i)
            } else {
                brief(app, p, i)
            }
        })
        .collect();
    let mut body = json!({ "images": items });
    // Nova's collection link: when the page is as long as asked.
    if let (Some(limit), Some(last)) = (limit, images.last()) {
        if more || images.len() as u64 == u64::from(limit) {
            let path = if is_detail { "images/detail" } else { "images" };
            body["images_links"] = json!([{"rel": "next", "href": format!(
                "{}/v2.1/{path}?limit={limit}&marker={}", app.public_url(), last.id)}]);
        }
    }
    Ok(Json(body))
}

/// `GET /images`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    list(&app, &ctx, raw.as_deref(), false).await
}

/// `GET /images/detail`.
pub async fn index_detail(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    list(&app, &ctx, raw.as_deref(), true).await
}

/// `GET /images/{id}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let p = proxy(&app, &ctx, IMAGES_LAST)?;
    let img = p.get(&ctx.claims, &ctx.request_id, &id).await?;
    Ok(Json(json!({ "image": detail(&app, p, &img) })))
}

/// `DELETE /images/{id}`: 204.
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let p = proxy(&app, &ctx, IMAGES_LAST)?;
    p.delete(&ctx.claims, &ctx.request_id, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Nova's `check_img_metadata_properties_quota`.
fn within_quota(props: &BTreeMap<String, String>) -> ApiResult<()> {
    if props.len() as i64 > MAX_METADATA_ITEMS {
        return Err(ApiError::Forbidden("Image metadata limit exceeded".into()));
    }
    Ok(())
}

/// The body's `field` (Nova's image metadata schemas: a required object of
/// metadata, nothing else in the body).
fn body_field(body: &[u8], field: &str) -> ApiResult<Vec<(String, String)>> {
    let v: Value = serde_json::from_slice(body).map_err(|_| bad("Malformed request body"))?;
    let Some(o) = v.as_object() else {
        return Err(bad(format!("{v} is not of type 'object'")));
    };
    if let Some(k) = o.keys().find(|k| k.as_str() != field) {
        return Err(bad(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let Some(m) = o.get(field) else {
        return Err(bad(format!("'{field}' is a required property")));
    };
    validate_metadata(m, field)
}

/// `GET /images/{id}/metadata`.
pub async fn meta_index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let p = proxy(&app, &ctx, METADATA_LAST)?;
    let img = p.get(&ctx.claims, &ctx.request_id, &id).await?;
    Ok(Json(json!({ "metadata": img.properties })))
}

/// `GET /images/{id}/metadata/{key}`.
pub async fn meta_show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, key)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let p = proxy(&app, &ctx, METADATA_LAST)?;
    let img = p.get(&ctx.claims, &ctx.request_id, &id).await?;
    match img.properties.get(&key) {
        Some(v) => Ok(Json(json!({ "meta": { key: v } }))),
        None => Err(ApiError::NotFound(
            "The resource could not be found.".into(),
        )),
    }
}

/// `POST /images/{id}/metadata`: merged into the image's.
pub async fn meta_create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let p = proxy(&app, &ctx, METADATA_LAST)?;
    let items = body_field(&body, "metadata")?;
    let mut props = p.get(&ctx.claims, &ctx.request_id, &id).await?.properties;
    props.extend(items);
    within_quota(&props)?;
    let img = p
        .set_properties(&ctx.claims, &ctx.request_id, &id, props)
        .await?;
    Ok(Json(json!({ "metadata": img.properties })))
}

/// `PUT /images/{id}/metadata`: the image's metadata replaced.
pub async fn meta_update_all(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let p = proxy(&app, &ctx, METADATA_LAST)?;
    let props: BTreeMap<String, String> = body_field(&body, "metadata")?.into_iter().collect();
    p.get(&ctx.claims, &ctx.request_id, &id).await?;
    within_quota(&props)?;
    p.set_properties(&ctx.claims, &ctx.request_id, &id, props.clone())
        .await?;
    Ok(Json(json!({ "metadata": props })))
}

/// `PUT /images/{id}/metadata/{key}`.
pub async fn meta_update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, key)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let p = proxy(&app, &ctx, METADATA_LAST)?;
    let items = body_field(&body, "meta")?;
    if items.len() > 1 {
        return Err(bad(format!(
            "Invalid input for field/attribute meta. Value: {}. {} has too many properties",
            metadata_object(&items),
            metadata_object(&items)
        )));
    }
    let Some((k, v)) = items.into_iter().next() else {
        return Err(bad(
            "Invalid input for field/attribute meta. Value: {}. {} does not have enough properties",
        ));
    };
    if k != key {
        return Err(bad("Request body and URI mismatch"));
    }
    let mut props = p.get(&ctx.claims, &ctx.request_id, &id).await?.properties;
    props.insert(k.clone(), v.clone());
    within_quota(&props)?;
    p.set_properties(&ctx.claims, &ctx.request_id, &id, props)
        .await?;
    Ok(Json(json!({ "meta": { k: v } })))
}

/// `DELETE /images/{id}/metadata/{key}`: 204.
pub async fn meta_delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path((id, key)): Path<(String, String)>,
) -> ApiResult<Response> {
    let p = proxy(&app, &ctx, METADATA_LAST)?;
    let mut props = p.get(&ctx.claims, &ctx.request_id, &id).await?.properties;
    if props.remove(&key).is_none() {
        return Err(ApiError::NotFound("Invalid metadata key".into()));
    }
    p.set_properties(&ctx.claims, &ctx.request_id, &id, props)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /os-networks`, `/os-networks/{id}` (to 2.35): Nova's proxy to the
/// network service, which this region does not have yet: 501 saying so.
pub async fn networks(Extension(ctx): Extension<Ctx>) -> ApiResult<Json<Value>> {
    if ctx.mv.at_least(IMAGES_LAST + 1) {
        return Err(gone());
    }
    Err(ApiError::NotImplemented(
        "There is no network service in this region for the os-networks proxy.".into(),
    ))
}
