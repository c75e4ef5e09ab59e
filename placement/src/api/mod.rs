//! The REST API: routes, the request frame (request id, microversion,
//! content negotiation, authentication) and the one place errors become
//! upstream's error body. Handlers parse, authorize and call into `service`;
//! they hold no SQL.

mod aggregates;
mod allocations;
mod body;
mod inventories;
mod query;
mod resource_classes;
mod resource_providers;
mod root;
mod traits;
mod usages;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use fabric::ids::RequestId;

use crate::auth::AuthStrategy;
use crate::error::{error_body, ErrorCode, PlacementError};
use crate::microversion::{self, Microversion, VersionError};
use crate::service::Placement;

pub use body::{parse_json, JsonBody};

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    /// The service logic.
    pub placement: Arc<Placement>,
    /// How requests are authenticated.
    pub auth: Arc<AuthStrategy>,
}

/// Builds the placement REST API.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(root::versions))
        .merge(resource_classes::routes())
        .merge(traits::routes())
        .merge(resource_providers::routes())
        .merge(inventories::routes())
        .merge(aggregates::routes())
        .merge(allocations::routes())
        .merge(usages::routes())
        .layer(axum::middleware::from_fn_with_state(state.clone(), frame))
        .with_state(state)
}

/// Marker a handler's error leaves on its response for [`frame`] to render.
#[derive(Clone)]
struct ErrorMarker {
    code: ErrorCode,
    detail: String,
}

impl IntoResponse for PlacementError {
    fn into_response(self) -> Response {
        let status = self.status();
        let (code, detail) = match &self {
            PlacementError::Client { code, detail, .. } => (*code, detail.clone()),
            other => {
                tracing::error!(error = ?other, "placement request failed");
                (
                    ErrorCode::Undefined,
                    "An internal error occurred.".to_owned(),
                )
            }
        };
        let mut resp = status.into_response();
        resp.extensions_mut().insert(ErrorMarker { code, detail });
        resp
    }
}

fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    if accept.trim().is_empty() {
        return true;
    }
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q_zero = parts.any(|p| {
            let p = p.trim();
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        !q_zero && matches!(media.as_str(), "application/json" | "application/*" | "*/*")
    })
}

/// The request frame around every handler.
async fn frame(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let request_id = RequestId::generate();
    let version_header = req
        .headers()
        .get(microversion::HEADER)
        .and_then(|v| v.to_str().ok());
    let negotiated = microversion::negotiate(version_header);
    let mv = negotiated
        .clone()
        .unwrap_or(Microversion(microversion::MIN));
    let method = req.method().clone();
    let path = req.uri().path().to_owned();

    let early: Option<(StatusCode, String)> = match negotiated {
        Err(VersionError::Invalid(v)) => Some((
            StatusCode::BAD_REQUEST,
            format!("invalid version string: {v}"),
        )),
        Err(VersionError::Unacceptable(v)) => Some((
            StatusCode::NOT_ACCEPTABLE,
            format!("Unacceptable version header: {v}"),
        )),
        Ok(_) => None,
    };
    let early = early.or_else(|| {
        (!accepts_json(req.headers())).then(|| {
            (
                StatusCode::NOT_ACCEPTABLE,
                "Only application/json is provided".to_owned(),
            )
        })
    });
    let early = early.or_else(|| {
        if path == "/" {
            return None;
        }
        match state.auth.authenticate(req.headers()) {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                None
            }
            Err(detail) => Some((StatusCode::UNAUTHORIZED, detail)),
        }
    });
    req.extensions_mut().insert(mv);

    let mut resp = match early {
        Some((status, detail)) => {
            let mut r = status.into_response();
            r.extensions_mut().insert(ErrorMarker {
                code: ErrorCode::Undefined,
                detail,
            });
            r
        }
        None => next.run(req).await,
    };

    let status = resp.status();
    let marker = resp.extensions_mut().remove::<ErrorMarker>();
    let bare = !resp.headers().contains_key(header::CONTENT_TYPE);
    let marker = marker.or_else(|| match status {
        StatusCode::NOT_FOUND if bare => Some(ErrorMarker {
            code: ErrorCode::Undefined,
            detail: String::new(),
        }),
        StatusCode::METHOD_NOT_ALLOWED if bare => Some(ErrorMarker {
            code: ErrorCode::Undefined,
            detail: format!("The method {method} is not allowed for this resource."),
        }),
        _ => None,
    });
    if let Some(m) = marker {
        let body = error_body(
            status,
            m.code,
            &m.detail,
            request_id.as_str(),
            mv.at_least(23),
        );
        let headers = std::mem::take(resp.headers_mut());
        resp = (status, body).into_response();
        for (k, v) in headers.iter() {
            if k != header::CONTENT_LENGTH && k != header::CONTENT_TYPE {
                resp.headers_mut().insert(k.clone(), v.clone());
            }
        }
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if status.is_server_error() {
            tracing::error!(%request_id, %method, %path, "internal error");
        } else if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            tracing::warn!(%request_id, %method, %path, status = status.as_u16(), "request denied");
        }
    }
    let h = resp.headers_mut();
    h.insert(
        "x-openstack-request-id",
        HeaderValue::from_str(request_id.as_str()).expect("ascii"),
    );
    h.insert(
        microversion::HEADER,
        HeaderValue::from_str(&mv.header_value()).expect("ascii"),
    );
    h.insert(header::VARY, HeaderValue::from_static(microversion::HEADER));
    if method == Method::GET && status == StatusCode::OK && mv.at_least(15) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        if !h.contains_key(header::LAST_MODIFIED) {
            let now = chrono::Utc::now()
                .format("%a, %d %b %Y %H:%M:%S GMT")
                .to_string();
            h.insert(
                header::LAST_MODIFIED,
                HeaderValue::from_str(&now).expect("ascii"),
            );
        }
    }
    crate::metrics::record_request(&method, status, started.elapsed());
    resp
}
