//! The Glance v2 subset over HTTP: routes, the caller extractor
//! (`X-Auth-Token` → project-scoped claims through the configured
//! [`fabric::token::Authenticator`]), and the renderers of Glance's JSON
//! shapes. Handlers parse and call into [`ImageService`]; they hold no SQL.

mod discovery;
mod images;

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::routing::{get, post, put};
use axum::Router;
use serde_json::{json, Value};

use super::error::{ImageError, Result};
use super::model::Image;
use super::service::{Caller, ImageService};
use crate::http::ReqId;

/// Shared state of every handler.
pub type State = Arc<ImageService>;

/// Builds the image API (with the request frame).
pub fn router(svc: State) -> Router {
    Router::new()
        .route("/", get(discovery::root))
        .route("/versions", get(discovery::versions))
        .route("/v2", get(discovery::versions))
        .route("/v2/", get(discovery::versions))
        .route("/v2/schemas/image", get(discovery::image_schema))
        .route("/v2/schemas/images", get(discovery::images_schema))
        .route("/v2/images", get(images::list).post(images::create))
        .route(
            "/v2/images/{id}",
            get(images::show)
                .patch(images::patch)
                .delete(images::delete),
        )
        .route(
            "/v2/images/{id}/file",
            get(images::download).put(images::upload),
        )
        .route(
            "/v2/images/{id}/tags/{tag}",
            put(images::add_tag).delete(images::remove_tag),
        )
        .route(
            "/v2/images/{id}/actions/deactivate",
            post(images::deactivate),
        )
        .route(
            "/v2/images/{id}/actions/reactivate",
            post(images::reactivate),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(crate::http::frame))
        .with_state(svc)
}

async fn not_found() -> ImageError {
    ImageError::NotFound("The resource could not be found.".into())
}

async fn method_not_allowed() -> axum::response::Response {
    super::error::error_response(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "The method is not allowed for the requested URL.",
    )
}

impl FromRequestParts<State> for Caller {
    type Rejection = ImageError;

    async fn from_request_parts(parts: &mut Parts, svc: &State) -> Result<Self> {
        let request_id = parts
            .extensions
            .get::<ReqId>()
            .map(|r| r.0.to_string())
            .unwrap_or_default();
        let token = parts
            .headers
            .get("x-auth-token")
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ImageError::unauthorized("no X-Auth-Token"))?;
        let claims = svc
            .auth
            .authenticate(token)
            .await
            .map_err(|e| ImageError::unauthorized(e.to_string()))?;
        Ok(Caller { claims, request_id })
    }
}

/// Glance's timestamp format.
fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// An image in Glance's shape: core attributes, then extra properties at
/// the top level.
pub fn image_json(img: &Image) -> Value {
    let r = &img.row;
    let mut v = json!({
        "id": r.id,
        "name": r.name,
        "status": r.status,
        "visibility": r.visibility,
        "protected": r.protected,
        "os_hidden": r.os_hidden,
        "owner": r.owner,
        "disk_format": r.disk_format,
        "container_format": r.container_format,
        "min_ram": r.min_ram,
        "min_disk": r.min_disk,
        "size": r.size,
        "virtual_size": r.virtual_size,
        "checksum": r.checksum,
        "os_hash_algo": r.os_hash_algo,
        "os_hash_value": r.os_hash_value,
        "tags": img.tags,
        "created_at": iso(r.created_at),
        "updated_at": iso(r.updated_at),
        "self": format!("/v2/images/{}", r.id),
        "file": format!("/v2/images/{}/file", r.id),
        "schema": "/v2/schemas/image",
    });
    if let Value::Object(m) = &mut v {
        for (k, val) in &img.properties {
            m.entry(k.clone()).or_insert_with(|| json!(val));
        }
    }
    v
}
