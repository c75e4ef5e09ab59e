//! `GET /`: version discovery (no authentication needed).

use axum::Json;
use serde_json::{json, Value};

use crate::microversion::MAX;

/// The version document.
pub async fn versions() -> Json<Value> {
    Json(json!({
        "versions": [{
            "id": "v1.0",
            "max_version": format!("1.{MAX}"),
            "min_version": "1.0",
            "status": "CURRENT",
            "links": [{"rel": "self", "href": ""}],
        }]
    }))
}
