//! Version discovery and the (minimal) JSON schemas.

use axum::extract::State as AxState;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::State;
use crate::image::model::{CONTAINER_FORMATS, DISK_FORMATS};

/// The newest Glance API minor version served (Glance 2024.1's).
pub const CURRENT: u32 = 16;

fn versions_doc(svc: &State) -> Value {
    let href = format!("{}/v2/", svc.public_url());
    let versions: Vec<Value> = (0..=CURRENT)
        .rev()
        .map(|minor| {
            json!({
                "id": format!("v2.{minor}"),
                "status": if minor == CURRENT { "CURRENT" } else { "SUPPORTED" },
                "links": [{"rel": "self", "href": href}],
            })
        })
        .collect();
    json!({ "versions": versions })
}

/// `GET /`: 300 Multiple Choices, as Glance answers.
pub async fn root(AxState(svc): AxState<State>) -> Response {
    (StatusCode::MULTIPLE_CHOICES, Json(versions_doc(&svc))).into_response()
}

/// `GET /versions`, `GET /v2/`.
pub async fn versions(AxState(svc): AxState<State>) -> Json<Value> {
    Json(versions_doc(&svc))
}

fn image_schema_doc() -> Value {
    let nullable_str = json!({"type": ["null", "string"], "maxLength": 255});
    let with_null = |list: &[&str]| -> Vec<Value> {
        std::iter::once(Value::Null)
            .chain(list.iter().map(|s| json!(s)))
            .collect()
    };
    let container_formats = with_null(CONTAINER_FORMATS);
    let disk_formats = with_null(DISK_FORMATS);
    json!({
        "name": "image",
        "additionalProperties": {"type": "string"},
        "properties": {
            "id": {"type": "string", "pattern": "^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$", "description": "An identifier for the image"},
            "name": nullable_str,
            "status": {"type": "string", "readOnly": true, "enum": ["queued", "saving", "active", "killed", "deleted"]},
            "visibility": {"type": "string", "enum": ["community", "public", "private", "shared"]},
            "protected": {"type": "boolean"},
            "os_hidden": {"type": "boolean"},
            "owner": nullable_str,
            "checksum": {"type": ["null", "string"], "readOnly": true, "maxLength": 32},
            "os_hash_algo": {"type": ["null", "string"], "readOnly": true, "maxLength": 64},
            "os_hash_value": {"type": ["null", "string"], "readOnly": true, "maxLength": 128},
            "min_ram": {"type": "integer"},
            "min_disk": {"type": "integer"},
            "size": {"type": ["null", "integer"], "readOnly": true},
            "virtual_size": {"type": ["null", "integer"], "readOnly": true},
            "container_format": {"type": ["null", "string"], "enum": container_formats},
            "disk_format": {"type": ["null", "string"], "enum": disk_formats},
            "created_at": {"type": "string", "readOnly": true},
            "updated_at": {"type": "string", "readOnly": true},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 255}},
            "self": {"type": "string", "readOnly": true},
            "file": {"type": "string", "readOnly": true},
            "schema": {"type": "string", "readOnly": true},
        },
        "links": [
            {"rel": "self", "href": "{self}"},
            {"rel": "enclosure", "href": "{file}"},
            {"rel": "describedby", "href": "{schema}"},
        ],
    })
}

/// `GET /v2/schemas/image`.
pub async fn image_schema() -> Json<Value> {
    Json(image_schema_doc())
}

/// `GET /v2/schemas/images`.
pub async fn images_schema() -> Json<Value> {
    Json(json!({
        "name": "images",
        "properties": {
            "images": {"type": "array", "items": image_schema_doc()},
            "schema": {"type": "string"},
            "first": {"type": "string"},
            "next": {"type": "string"},
        },
        "links": [
            {"rel": "first", "href": "{first}"},
            {"rel": "next", "href": "{next}"},
            {"rel": "describedby", "href": "{schema}"},
        ],
    }))
}
