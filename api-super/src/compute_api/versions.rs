//! Version discovery as Nova's: `GET /` (every version), `GET /v2.1` (this
//! one) and `GET /v2` (the legacy v2.0 API), and Nova's `/v2/…`: the v2.1
//! API without microversions ([`legacy_v2`]).

use axum::extract::{Request, State};
use axum::http::header::VARY;
use axum::http::Uri;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::microversion::{MAX, MIN};
use super::App;

/// A request that came in under `/v2` (Nova's `is_legacy_v2`).
#[derive(Debug, Clone, Copy)]
pub struct LegacyV2;

/// The microversion headers, of requests and answers.
const VERSION_HEADERS: [&str; 2] = ["openstack-api-version", "x-openstack-nova-api-version"];

/// Nova's `VERSIONS`: `(id, status, version, min_version, updated, media
/// type, path)`. The v2.0 API is Nova's deprecated one (since 2025.2).
fn versions() -> [(
    &'static str,
    &'static str,
    String,
    String,
    &'static str,
    &'static str,
    &'static str,
); 2] {
    [
        (
            "v2.0",
            "DEPRECATED",
            String::new(),
            String::new(),
            "2025-07-04T12:00:00Z",
            "application/vnd.openstack.compute+json;version=2",
            "v2",
        ),
        (
            "v2.1",
            "CURRENT",
            MAX.as_string(),
            MIN.as_string(),
            "2013-07-23T11:33:21Z",
            "application/vnd.openstack.compute+json;version=2.1",
            "v2.1",
        ),
    ]
}

/// One version's document: in the list (`full` false: a self link only)
/// or on its own (its self link, Nova's `describedby` and media types).
fn version(base: &str, id: &str, full: bool) -> Value {
    let Some((id, status, ver, min, updated, media, path)) =
        versions().into_iter().find(|v| v.0 == id)
    else {
        return Value::Null;
    };
    let mut v = json!({
        "id": id,
        "status": status,
        "version": ver,
        "min_version": min,
        "updated": updated,
        "links": [{"rel": "self", "href": format!("{base}/{path}/")}],
    });
    if full {
        v["links"]
            .as_array_mut()
            .expect("links")
            .push(json!({"rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/"}));
        v["media-types"] = json!([{"base": "application/json", "type": media}]);
    }
    v
}

/// `GET /`: v2.0, then v2.1.
pub async fn root(State(app): State<App>) -> Response {
    let base = app.public_url();
    let all: Vec<Value> = versions()
        .iter()
        .map(|v| version(&base, v.0, false))
        .collect();
    Json(json!({ "versions": all })).into_response()
}

/// `GET /v2.1` (and, under `/v2`, the v2.0 document, as Nova's
/// `VersionsV2`).
pub async fn v2_1(State(app): State<App>, legacy: Option<Extension<LegacyV2>>) -> Response {
    let id = if legacy.is_some() { "v2.0" } else { "v2.1" };
    Json(json!({ "version": version(&app.public_url(), id, true) })).into_response()
}

/// Nova's `/v2` and `/v2/…` (its `LegacyV2CompatibleWrapper`): the v2.1
/// API at its base version 2.1, whatever microversion the request names
/// (the headers are dropped), and an answer without microversion
/// headers. Runs before routing: the path is rewritten to `/v2.1…`.
pub async fn legacy_v2(mut req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let rest = match path.strip_prefix("/v2") {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.to_owned(),
        _ => return next.run(req).await,
    };
    let query = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let Ok(uri) = format!("/v2.1{rest}{query}").parse::<Uri>() else {
        return next.run(req).await;
    };
    *req.uri_mut() = uri;
    for h in VERSION_HEADERS {
        req.headers_mut().remove(h);
    }
    req.extensions_mut().insert(LegacyV2);
    let mut resp = next.run(req).await;
    for h in VERSION_HEADERS {
        resp.headers_mut().remove(h);
    }
    // Vary named only the microversion headers.
    resp.headers_mut().remove(VARY);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_0_is_listed_first_and_deprecated() {
        let v20 = version("http://h", "v2.0", false);
        assert_eq!(v20["status"], "DEPRECATED");
        assert_eq!(v20["version"], "");
        assert_eq!(
            v20["links"],
            json!([{"rel": "self", "href": "http://h/v2/"}])
        );
        assert!(v20.get("media-types").is_none());
        assert_eq!(versions()[0].0, "v2.0");
        let v21 = version("http://h", "v2.1", true);
        assert_eq!(v21["links"][0]["href"], "http://h/v2.1/");
        assert_eq!(
            v21["media-types"][0]["type"],
            "application/vnd.openstack.compute+json;version=2.1"
        );
    }
}
