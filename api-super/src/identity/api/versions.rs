//! Version discovery: `GET /` (300, the list) and `GET /v3`.

use axum::extract::State as S;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::State;

fn version_doc(url: &str) -> Value {
    json!({
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{url}/v3/")}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}],
    })
}

/// `GET /`.
pub async fn root(S(id): S<State>) -> Response {
    let body = json!({"versions": {"values": [version_doc(&id.public_url())]}});
    (StatusCode::MULTIPLE_CHOICES, Json(body)).into_response()
}

/// `GET /v3`.
pub async fn v3(S(id): S<State>) -> Json<Value> {
    Json(json!({"version": version_doc(&id.public_url())}))
}
