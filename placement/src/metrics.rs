//! Metric names of the placement service (labels from small enums only).

use std::time::Duration;

use axum::http::{Method, StatusCode};

/// Request latency histogram, seconds, by method and status class.
pub const REQUEST_SECONDS: &str = "placement_request_seconds";
/// Internal retries of allocation writes after a concurrent update.
pub const ALLOCATION_RETRIES: &str = "placement_allocation_retries_total";
/// Committed allocation writes, by `path`: `single_statement` (a new
/// consumer's claim on one provider, PostgreSQL) or `transaction`.
pub const ALLOCATION_WRITES: &str = "placement_allocation_writes_total";

/// Records one request.
pub fn record_request(method: &Method, status: StatusCode, elapsed: Duration) {
    let class = match status.as_u16() {
        200..=299 => "2xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    };
    let method = match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        _ => "OTHER",
    };
    metrics::histogram!(REQUEST_SECONDS, "method" => method, "status" => class)
        .record(elapsed.as_secs_f64());
}

/// Counts one internal allocation retry.
pub fn allocation_retry() {
    metrics::counter!(ALLOCATION_RETRIES).increment(1);
}

/// Counts one committed allocation write; `single_statement` names the path.
pub fn allocation_write(single_statement: bool) {
    let path = if single_statement {
        "single_statement"
    } else {
        "transaction"
    };
    metrics::counter!(ALLOCATION_WRITES, "path" => path).increment(1);
}
