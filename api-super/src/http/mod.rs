//! The request frame every api-super HTTP API shares: a request id on every
//! request (`x-openstack-request-id` on every response, a tracing span around
//! the handler so every log line carries it) and the client's address.
//!
//! The frame logs method, path and status, never headers or bodies: tokens
//! and passwords never reach a log line.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use fabric::ids::RequestId;
use tracing::Instrument;

/// The header carrying the request id.
pub const REQUEST_ID_HEADER: &str = "x-openstack-request-id";

/// The id of the request being handled (a request extension).
#[derive(Debug, Clone)]
pub struct ReqId(pub RequestId);

/// The client's address (a request extension; `0.0.0.0` when the server was
/// started without connection info).
#[derive(Debug, Clone, Copy)]
pub struct SourceAddr(pub IpAddr);

/// The frame: request id, source address, span, access log.
pub async fn frame(mut req: Request, next: Next) -> Response {
    let id = RequestId::generate();
    let source = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    req.extensions_mut().insert(ReqId(id.clone()));
    req.extensions_mut().insert(SourceAddr(source));
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let span = tracing::info_span!("request", request_id = %id);
    let started = std::time::Instant::now();
    let mut resp = next.run(req).instrument(span.clone()).await;
    let status = resp.status().as_u16();
    span.in_scope(|| {
        tracing::debug!(%method, %path, status, elapsed_ms = started.elapsed().as_millis() as u64, "request");
    });
    if let Ok(v) = HeaderValue::from_str(id.as_str()) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}
