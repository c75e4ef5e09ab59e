//! Version discovery: `GET /` (every version) and `GET /v2.1` (this one).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::microversion::{MAX, MIN};
use super::App;

fn v21(base: &str) -> Value {
    json!({
        "id": "v2.1",
        "status": "CURRENT",
        "version": MAX.as_string(),
        "min_version": MIN.as_string(),
        "updated": "2013-07-23T11:33:21Z",
        "links": [{"rel": "self", "href": format!("{base}/v2.1/")},
                  {"rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/"}],
        "media-types": [{"base": "application/json",
                         "type": "application/vnd.openstack.compute+json;version=2.1"}],
    })
}

/// `GET /`.
pub async fn root(State(app): State<App>) -> Response {
    let mut v = v21(&app.public_url());
    if let Some(o) = v.as_object_mut() {
        o.remove("media-types");
    }
    Json(json!({ "versions": [v] })).into_response()
}

/// `GET /v2.1`.
pub async fn v2_1(State(app): State<App>) -> Response {
    Json(json!({ "version": v21(&app.public_url()) })).into_response()
}
