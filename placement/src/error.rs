//! The placement service's one error type, and the one place it becomes an
//! HTTP response in upstream's error-body format:
//! `{"errors": [{"status", "title", "detail", "request_id", "code"}]}`
//! (`code` from microversion 1.23 on, as upstream).

use axum::http::StatusCode;

use crate::engine::EngineError;

/// Upstream's machine-readable error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// `placement.undefined_code`
    Undefined,
    /// `placement.concurrent_update`: a stale generation.
    ConcurrentUpdate,
    /// `placement.duplicate_name`
    DuplicateName,
    /// `placement.inventory.inuse`
    InventoryInUse,
    /// `placement.resource_provider.inuse`
    ProviderInUse,
    /// `placement.resource_provider.cannot_delete_parent`
    CannotDeleteParent,
    /// `placement.resource_provider.not_found`
    ProviderNotFound,
    /// `placement.query.duplicate_key`
    QueryDuplicateKey,
    /// `placement.query.bad_value`
    QueryBadValue,
    /// `placement.query.missing_value`
    QueryMissingValue,
}

impl ErrorCode {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Undefined => "placement.undefined_code",
            Self::ConcurrentUpdate => "placement.concurrent_update",
            Self::DuplicateName => "placement.duplicate_name",
            Self::InventoryInUse => "placement.inventory.inuse",
            Self::ProviderInUse => "placement.resource_provider.inuse",
            Self::CannotDeleteParent => "placement.resource_provider.cannot_delete_parent",
            Self::ProviderNotFound => "placement.resource_provider.not_found",
            Self::QueryDuplicateKey => "placement.query.duplicate_key",
            Self::QueryBadValue => "placement.query.bad_value",
            Self::QueryMissingValue => "placement.query.missing_value",
        }
    }
}

/// Everything a placement request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// A client-visible failure with its status and code.
    #[error("{detail}")]
    Client {
        /// HTTP status.
        status: StatusCode,
        /// Upstream error code.
        code: ErrorCode,
        /// Human-readable detail.
        detail: String,
    },
    /// The database failed (not the client's fault).
    #[error("database error")]
    Db(#[source] sqlx::Error),
    /// A migration could not be applied at start.
    #[error("database schema")]
    Migrate(#[source] migrations::Error),
}

impl From<sqlx::Error> for PlacementError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(e)
    }
}

impl From<EngineError> for PlacementError {
    fn from(e: EngineError) -> Self {
        PlacementError::bad_request(e.to_string())
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = PlacementError> = std::result::Result<T, E>;

impl PlacementError {
    /// A client error with an explicit status and code.
    pub fn client(status: StatusCode, code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::Client {
            status,
            code,
            detail: detail.into(),
        }
    }
    /// 400 with the default code.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::client(StatusCode::BAD_REQUEST, ErrorCode::Undefined, detail)
    }
    /// 404 with the default code.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::client(StatusCode::NOT_FOUND, ErrorCode::Undefined, detail)
    }
    /// 409 with the given code.
    pub fn conflict(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::client(StatusCode::CONFLICT, code, detail)
    }
    /// 409 `placement.concurrent_update`.
    pub fn generation_conflict(detail: impl Into<String>) -> Self {
        Self::conflict(ErrorCode::ConcurrentUpdate, detail)
    }
    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Client { status, .. } => *status,
            Self::Db(_) | Self::Migrate(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Upstream's explanation line for a status (webob's wording).
pub fn explanation(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "The server could not comply with the request since it is either malformed or otherwise incorrect.",
        401 => "This server could not verify that you are authorized to access the document you requested.",
        403 => "Access was denied to this resource.",
        404 => "The resource could not be found.",
        405 => "The method specified is not allowed.",
        406 => "The resource could not be generated that was acceptable to your browser (content of type application/json.",
        409 => "There was a conflict when trying to complete your request.",
        415 => "The request media type is not supported by this server.",
        _ => "The server has either erred or is incapable of performing the requested operation.",
    }
}

/// Renders upstream's error body.
pub fn error_body(
    status: StatusCode,
    code: ErrorCode,
    detail: &str,
    request_id: &str,
    with_code: bool,
) -> String {
    let title = status.canonical_reason().unwrap_or("Error");
    let full = if detail.is_empty() {
        explanation(status).to_owned()
    } else {
        format!("{}\n\n {}  ", explanation(status), detail)
    };
    let mut err = serde_json::json!({
        "status": status.as_u16(),
        "title": title,
        "detail": full,
        "request_id": request_id,
    });
    if with_code {
        err["code"] = serde_json::Value::String(code.as_str().to_owned());
    }
    serde_json::json!({ "errors": [err] }).to_string()
}
