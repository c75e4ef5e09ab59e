//! The REST API: routes, the request frame (request id, microversion,
//! content negotiation, authentication) and the one place errors become
//! upstream's error body. Handlers parse, authorize and call into `service`;
//! they hold no SQL.

mod aggregates;
mod allocation_candidates;
pub(crate) mod allocations;
mod body;
mod inventories;
mod query;
mod reshaper;
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
    /// The rules callers are held to ([`crate::policy`]).
    pub policy: Arc<fabric::policy::Policy>,
    /// `randomize_allocation_candidates`: shuffle candidates before `limit`.
    pub randomize_allocation_candidates: bool,
    /// `https` when the server speaks TLS, else `http` (absolute
    /// `Location` headers).
    pub scheme: &'static str,
}

/// Builds the placement REST API.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/", get(root::versions))
        .merge(resource_classes::routes())
        .merge(allocation_candidates::routes())
        .merge(traits::routes())
        .merge(resource_providers::routes())
        .merge(inventories::routes())
        .merge(aggregates::routes())
        .merge(allocations::routes())
        .merge(usages::routes())
        .merge(reshaper::routes())
        .layer(axum::middleware::from_fn_with_state(state.clone(), frame))
        .with_state(state);
    // axum adds `Allow` to a 405 outside the route's layers: wrap the whole
    // router to give it upstream's form.
    Router::new()
        .fallback_service(api)
        .layer(axum::middleware::map_response(allow_without_head))
}

async fn allow_without_head(mut resp: Response) -> Response {
    if resp.status() == StatusCode::METHOD_NOT_ALLOWED {
        normalize_allow(resp.headers_mut());
    }
    resp
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
    // Upstream checks `Accept` only in its GET handlers (`check_accept`), after
    // routing: an unknown route is a 404 whatever is acceptable, and an error
    // is rendered in the media type asked for.
    let json_ok = accepts_json(req.headers());
    let error_media = error_media_type(req.headers(), json_ok);
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // A `Content-Length` that is not an integer (renamed by the listener,
    // which also makes hyper close the connection afterwards): upstream's
    // handler refuses it after authentication, before routing.
    let invalid_length = req
        .headers()
        .contains_key(crate::listener::INVALID_CONTENT_LENGTH);
    let early = match early {
        Some(e) => Some(e),
        None if path == "/" => None,
        None => match state.auth.authenticate(req.headers(), &state.policy).await {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                None
            }
            Err(detail) => Some((StatusCode::UNAUTHORIZED, detail)),
        },
    };
    let early = match early {
        None if invalid_length => Some((
            StatusCode::BAD_REQUEST,
            "content-length header must be an integer".to_owned(),
        )),
        e => e,
    };
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

    let bare = !resp.headers().contains_key(header::CONTENT_TYPE)
        && resp.extensions().get::<ErrorMarker>().is_none();
    let routed = !(bare
        && matches!(
            resp.status(),
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
        ));
    if method == Method::GET && !json_ok && routed && !resp.status().is_client_error() {
        resp = StatusCode::NOT_ACCEPTABLE.into_response();
        resp.extensions_mut().insert(ErrorMarker {
            code: ErrorCode::Undefined,
            detail: "Only application/json is provided".to_owned(),
        });
    }
    let status = resp.status();
    let marker = resp.extensions_mut().remove::<ErrorMarker>();
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
        let body = match error_media {
            ErrorMedia::Json => error_body(
                status,
                m.code,
                &m.detail,
                request_id.as_str(),
                mv.at_least(23),
            ),
            ErrorMedia::Html => error_html(status, &m.detail),
            ErrorMedia::Text => error_text(status, &m.detail),
        };
        let headers = std::mem::take(resp.headers_mut());
        resp = (status, body).into_response();
        for (k, v) in headers.iter() {
            if k != header::CONTENT_LENGTH && k != header::CONTENT_TYPE {
                resp.headers_mut().insert(k.clone(), v.clone());
            }
        }
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(error_media.content_type()),
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
    absolute_location(h, state.scheme, host.as_deref());
    // Upstream sends the cache headers (1.15+) with GET answers and with
    // PUT/POST answers that carry a body (handlers add them to others).
    let cacheable = match method {
        Method::GET => status.is_success(),
        Method::PUT | Method::POST => status.is_success() && h.contains_key(header::CONTENT_TYPE),
        _ => false,
    };
    if cacheable && mv.at_least(15) {
        add_cache_headers(h);
    }
    crate::metrics::record_request(&method, status, started.elapsed());
    resp
}

/// The media type an error body is rendered in (webob's choice upstream).
#[derive(Clone, Copy)]
enum ErrorMedia {
    Json,
    Html,
    Text,
}

impl ErrorMedia {
    fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Html => "text/html; charset=UTF-8",
            Self::Text => "text/plain; charset=UTF-8",
        }
    }
}

fn error_media_type(headers: &HeaderMap, json_ok: bool) -> ErrorMedia {
    if json_ok {
        return ErrorMedia::Json;
    }
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("text/html") {
        ErrorMedia::Html
    } else if accept.contains("text/plain") {
        ErrorMedia::Text
    } else {
        ErrorMedia::Json
    }
}

fn error_html(status: StatusCode, detail: &str) -> String {
    let title = format!(
        "{} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error")
    );
    let detail = detail
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let explanation = crate::error::explanation(status);
    format!(
        "<html>\n <head>\n  <title>{title}</title>\n </head>\n <body>\n  <h1>{title}</h1>\n  \
         {explanation}<br /><br />\n{detail}\n\n\n </body>\n</html>"
    )
}

fn error_text(status: StatusCode, detail: &str) -> String {
    format!(
        "{} {}\n\n{}\n\n {detail}  ",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        crate::error::explanation(status)
    )
}

/// Upstream lists the allowed methods as `GET, POST`, without `HEAD`.
fn normalize_allow(headers: &mut HeaderMap) {
    let Some(allow) = headers.get(header::ALLOW).and_then(|v| v.to_str().ok()) else {
        return;
    };
    let methods: Vec<&str> = allow
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty() && *m != "HEAD")
        .collect();
    if let Ok(v) = HeaderValue::from_str(&methods.join(", ")) {
        headers.insert(header::ALLOW, v);
    }
}

/// Upstream's `Location` headers are absolute URLs (webob makes them so).
fn absolute_location(headers: &mut HeaderMap, scheme: &str, host: Option<&str>) {
    let Some(host) = host else { return };
    let Some(loc) = headers.get(header::LOCATION).and_then(|v| v.to_str().ok()) else {
        return;
    };
    if loc.starts_with('/') {
        if let Ok(v) = HeaderValue::from_str(&format!("{scheme}://{host}{loc}")) {
            headers.insert(header::LOCATION, v);
        }
    }
}

/// Upstream's cache headers (1.15+): `no-cache` and a `Last-Modified`
/// (now, unless the handler knows better).
pub(crate) fn add_cache_headers(h: &mut HeaderMap) {
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
